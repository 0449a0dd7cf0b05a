"""`interpscope graph`: the attribution graph of a prediction over per-layer transcoders (schema interpscope.graph)."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import int_at_least, positive_fraction, unit_fraction
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_out_file,
    check_outputs,
    check_run_memory,
    emit_json,
    load_from_args,
    write_outputs,
)


def register(subparsers) -> None:
    from interpscope.graphs.defaults import (
        CONVENTIONS,
        CT_EDGE_THRESHOLD,
        CT_MAX_LOGITS,
        CT_NODE_THRESHOLD,
        DEFAULT_EDGE_BUDGET,
        DEFAULT_LOGIT_PROBABILITY,
        DEFAULT_MAX_FEATURE_NODES,
        DEFAULT_MAX_LOGITS,
        DEFAULT_NODE_BUDGET,
        MAX_LOGITS,
        MAX_TOKENS,
    )
    from interpscope.relevance.methods import rule_methods

    graph = subparsers.add_parser(
        "graphs", aliases=["graph"], help="attribution graph of a prediction over per-layer transcoders",
        description="Trace the next-token logit after a text through the transcoder replacement model (attention "
                    "patterns and norm scales frozen, an error node per layer and position): embedding, feature, "
                    "error and logit nodes with direct-effect edges, pruned by influence; replacement and "
                    f"completeness scores; LRP edges into the logit beside them. Texts up to {MAX_TOKENS} tokens.")
    add_model_args(graph)
    graph.add_argument("--text", help="the prompt")
    graph.add_argument("--texts", metavar="FILE",
                       help="instead of --text, with --ablation-check N and --check-json: one prompt per line (.txt) "
                            "or row (.csv text column / .jsonl \"text\"), each with its own graph and check; the "
                            "means over the prompts with 95%% intervals beside the control (schema "
                            "interpscope.graph.ablation_check_set)")
    graph.add_argument("--target", help="the next token to explain (text of one token, or #id; default: the top one)")
    graph.add_argument("--contrast", metavar="TOKEN",
                       help="explain logit(target) - logit(TOKEN) instead: why the target rather than this token "
                            "(circuit-tracer's contrastive targets; one logit node)")
    graph.add_argument("--targets", nargs="+", metavar="TOKEN",
                       help=f"the logit nodes as a list of 1 to {MAX_LOGITS} tokens (the first is the target), "
                            "influence weighted by their probabilities, instead of the top --max-logits")
    graph.add_argument("--convention", choices=CONVENTIONS, default=CONVENTIONS[0],
                       help="interpscope (default): the raw logit, every part of the computation in a node (b_dec in "
                            "the error nodes, the BOS position kept unranked), every active feature a source, "
                            "pruned to node and edge budgets; circuit-tracer: circuit-tracer 0.5.0's graph (the "
                            "demeaned logit, top logits weighted by probability, b_dec and the first position's MLP "
                            "output in no node, expanded features only, its selection order and prune_graph "
                            "thresholds; the sums fall short of the logit by the left-out parts, which the graph "
                            "reports). See docs/methods/attribution-graphs.md")
    graph.add_argument("--node-budget", type=int_at_least(1), default=None,
                       help=f"feature and error nodes kept (default {DEFAULT_NODE_BUDGET}; interpscope convention)")
    graph.add_argument("--edge-budget", type=int_at_least(1), default=None,
                       help=f"edges kept (default {DEFAULT_EDGE_BUDGET}; interpscope convention)")
    graph.add_argument("--node-threshold", type=unit_fraction, default=None,
                       help=f"circuit-tracer convention: keep the nodes covering this share of the influence "
                            f"(default {CT_NODE_THRESHOLD})")
    graph.add_argument("--edge-threshold", type=unit_fraction, default=None,
                       help=f"circuit-tracer convention: keep the edges covering this share of the edge influence "
                            f"(default {CT_EDGE_THRESHOLD})")
    graph.add_argument("--max-feature-nodes", type=int_at_least(1), default=DEFAULT_MAX_FEATURE_NODES,
                       help=f"features whose inputs are computed, most influential first "
                            f"(default {DEFAULT_MAX_FEATURE_NODES})")
    graph.add_argument("--max-logits", type=int_at_least(1), default=None,
                       help=f"logit nodes: {DEFAULT_MAX_LOGITS} (default; {CT_MAX_LOGITS} in the circuit-tracer "
                            f"convention) traces the target alone; up to {MAX_LOGITS} adds the most "
                            f"probable other next tokens until they cover --logit-probability, influence weighted by "
                            f"their probabilities (circuit-tracer's top logits)")
    # checked as it is parsed: nan, inf or 2 used to load the model first and be refused only then
    graph.add_argument("--logit-probability", type=positive_fraction, default=DEFAULT_LOGIT_PROBABILITY,
                       help=f"with --max-logits above 1: the next-token probability the logit nodes cover "
                            f"(default {DEFAULT_LOGIT_PROBABILITY})")
    graph.add_argument("--transcoders", metavar="DIR",
                       help="a transcoder set folder (manifest.json + layer_XX/, or Gemma Scope 2's layer "
                            "folders), or a cross-layer transcoder folder (circuit-tracer's CLT layout); default: "
                            "the set shipped for the model")
    # the registry's transformer LRP rule sets (the graph runs on attention models), never typed here
    lrp_names = [m.name for m in rule_methods() if "transformer_lrp" in m.requires]
    graph.add_argument("--lrp", choices=[*lrp_names, "none"], default=lrp_names[0],
                       help=f"LRP method for the LRP edges into the logit (default {lrp_names[0]})")
    graph.add_argument("--lrp-features", type=int_at_least(0), default=0,
                       help="also the LRP edges into this many kept features, most influential first (one more LRP "
                            "pass each; default 0)")
    from interpscope.graphs.result import AttributionGraph

    add_outputs(graph, AttributionGraph, json_help="write the graph's JSON document to FILE; without FILE or with '-' "
                                                   "print it to stdout")
    check = graph.add_argument_group(
        "ablation check", "ablate the graph's strongest feature nodes one by one in real forward passes and compare "
                          "the logit changes with the graph's predictions (schema interpscope.graph.ablation_check, "
                          "the page's export)")
    check.add_argument("--ablation-check", type=int_at_least(0), default=0, metavar="N",
                       help="ablate the N strongest feature nodes and N random active features (the control); "
                            "0 (default): no check")
    check.add_argument("--check-supernodes", type=float, metavar="THRESHOLD",
                       help="rank and ablate supernodes instead: features grouped by decoder cosine >= THRESHOLD "
                            "(in (0, 1]; singletons kept, as the page's automatic grouping)")
    check.add_argument("--check-readouts", action="store_true",
                       help="also the diagnostic readouts (the real model with the graph's frozen parts imposed)")
    check.add_argument("--check-json", metavar="OUT", help="write the check's JSON to OUT ('-' for stdout)")
    graph.set_defaults(func=run_graph)


def _convention_options(args: argparse.Namespace) -> dict:
    """build_graph's options of the chosen convention; options of the other one are refused, not ignored."""
    from interpscope.config import InterpscopeError
    from interpscope.graphs.defaults import (
        CT_EDGE_THRESHOLD,
        CT_NODE_THRESHOLD,
        DEFAULT_EDGE_BUDGET,
        DEFAULT_NODE_BUDGET,
    )

    if args.convention == "circuit-tracer":
        given = [flag for flag, value in (("--node-budget", args.node_budget), ("--edge-budget", args.edge_budget))
                 if value is not None]
        if given:
            raise InterpscopeError(f"{', '.join(given)}: the circuit-tracer convention prunes by --node-threshold and "
                                   f"--edge-threshold, not by budgets.")
        if args.ablation_check:
            raise InterpscopeError("--ablation-check predicts the raw logit with every part in a node: it runs on the "
                                   "interpscope convention only.")
        return dict(convention=args.convention,
                    node_threshold=CT_NODE_THRESHOLD if args.node_threshold is None else args.node_threshold,
                    edge_threshold=CT_EDGE_THRESHOLD if args.edge_threshold is None else args.edge_threshold)
    given = [flag for flag, value in (("--node-threshold", args.node_threshold),
                                      ("--edge-threshold", args.edge_threshold)) if value is not None]
    if given:
        raise InterpscopeError(f"{', '.join(given)} belong(s) to --convention circuit-tracer; the interpscope "
                               f"convention prunes by --node-budget and --edge-budget.")
    return dict(node_budget=DEFAULT_NODE_BUDGET if args.node_budget is None else args.node_budget,
                edge_budget=DEFAULT_EDGE_BUDGET if args.edge_budget is None else args.edge_budget)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse check options that would be ignored, and two documents on one stdout, before anything runs."""
    from interpscope.config import InterpscopeError

    if not args.ablation_check:
        given = [flag for flag, value in (("--check-supernodes", args.check_supernodes is not None),
                                          ("--check-readouts", args.check_readouts),
                                          ("--check-json", args.check_json)) if value]
        if given:
            raise InterpscopeError(f"{', '.join(given)} need(s) --ablation-check N (N >= 1).")
    if args.check_supernodes is not None and not 0.0 < args.check_supernodes <= 1.0:
        raise InterpscopeError(f"--check-supernodes must be a cosine in (0, 1], got {args.check_supernodes:g}.")
    if args.json == "-" and args.check_json == "-":
        raise InterpscopeError("--json - and --check-json - would write two documents to stdout; give one a file.")


def run_graph(args: argparse.Namespace) -> int:
    from interpscope.config import InterpscopeError
    from interpscope.graphs.build import build_graph
    from interpscope.inputs import check_text
    from interpscope.sae.transcoder_set import default_transcoder_set, dictionary_width, load_dictionary

    if args.texts is not None:
        return _check_set(args)
    if args.text is None:
        raise InterpscopeError("Give --text (one graph), or --texts FILE with --ablation-check N (the check over many "
                               "prompts).")
    check_text(args.text)
    _check_options(args)
    conventional = _convention_options(args)
    check_outputs(args)
    check_out_file(args.check_json, "--check-json")
    lm = load_from_args(args)
    folder = args.transcoders or default_transcoder_set(lm.name)
    if folder is None:
        raise InterpscopeError(f"No transcoders for {lm.name}: none is shipped for it; pass --transcoders DIR (a "
                               f"set folder, e.g. from scripts/train_transcoders.py).")
    transcoders = load_dictionary(folder, lm=lm)
    from interpscope.graphs.build import check_request

    # everything wrong with the request is refused first, as its one line, before the memory estimate is printed
    budgets = {k: v for k, v in conventional.items() if k.endswith("_budget")}
    check_request(lm, args.text, target=args.target, contrast=args.contrast, targets=args.targets,
                  max_logits=args.max_logits, logit_probability=args.logit_probability,
                  budgets={**budgets, "max_feature_nodes": args.max_feature_nodes},
                  **{k: v for k, v in conventional.items() if k not in budgets})
    check_run_memory(lm, "graph", args.text, graph_width=dictionary_width(transcoders),
                     graph_feature_nodes=args.max_feature_nodes)
    result = build_graph(lm, transcoders, args.text, target=args.target, contrast=args.contrast,
                         targets=args.targets, **conventional, max_feature_nodes=args.max_feature_nodes,
                         lrp=None if args.lrp == "none" else args.lrp, lrp_features=args.lrp_features,
                         max_logits=args.max_logits, logit_probability=args.logit_probability)
    write_outputs(args, result)
    if "-" not in (args.json, args.check_json):  # stdout carries at most one document and nothing else
        target = result.target
        explained = repr(target["token"]) + (f" rather than {target['contrast']['token']!r}"
                                             if "contrast" in target else "")
        shown = "demeaned logit" if result.convention == "circuit-tracer" and "contrast" not in target else "logit"
        left = (f" (+ {result.left_out['total']:.4f} in no node: b_dec and the first position)"
                if result.left_out else "")
        print(f"Attribution graph of {explained} (p = {target['probability']:.3f}) on {result.model} "
              f"({result.convention} convention): {shown} {result.logit:.4f}, direct contributions sum to "
              f"{result.logit_inputs_sum:.4f}{left}; "
              f"{len(result.nodes)} nodes, {len(result.edges)} edges kept of {result.n_active_features} active "
              f"features ({result.n_expanded_features} expanded); replacement score "
              f"{result.replacement_score:.3f}, completeness {result.completeness_score:.3f}; "
              f"{result.seconds:.1f} s")
        if result.logits:
            print(f"{len(result.logits)} logit nodes: " + ", ".join(
                f"{entry['token']!r} p {entry['probability']:.3f} (weight {entry['weight']:.3f})"
                for entry in result.logits))
    if args.ablation_check:
        _ablation_check(lm, transcoders, result, args)
    return 0


def _ablation_check(lm, transcoders, graph, args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from interpscope.graphs.freeze import READOUTS
    from interpscope.graphs.grouping import group_by_decoder
    from interpscope.graphs.interventions import ablation_check

    groups = None if args.check_supernodes is None else group_by_decoder(graph.nodes, transcoders,
                                                                            args.check_supernodes, singletons=True)
    bar = tqdm(total=1, desc="Ablation check (real forward passes)", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
    check = ablation_check(lm, transcoders, graph, n=args.ablation_check, groups=groups, progress=progress,
                           readouts=tuple(READOUTS) if args.check_readouts else ())
    bar.close()
    if args.check_json:
        emit_json(check, args.check_json)
    if "-" not in (args.json, args.check_json):
        print(check.summary())


def _check_set(args: argparse.Namespace) -> int:
    """--texts: the ablation check over many prompts (interpscope.graphs.check_set); its document goes to
    --check-json (the graphs themselves are not kept)."""
    from pathlib import Path

    from tqdm import tqdm

    from interpscope.cli.common import read_input_bytes
    from interpscope.config import InterpscopeError
    from interpscope.graphs.check_set import ablation_check_set
    from interpscope.sae.transcoder_set import default_transcoder_set, load_dictionary
    from interpscope.uploads import parse_examples

    if args.text is not None:
        raise InterpscopeError("--texts takes no --text.")
    if not args.ablation_check:
        raise InterpscopeError("--texts runs the ablation check over the prompts: give --ablation-check N (N >= 1).")
    if args.check_supernodes is not None or args.check_readouts:
        raise InterpscopeError("--texts runs the plain check: it takes no --check-supernodes or --check-readouts.")
    for flag in ("json", "csv", "png", "svg", "html"):
        if getattr(args, flag, None) is not None:
            raise InterpscopeError(f"--texts keeps no graph: its document goes to --check-json, not --{flag}.")
    if not args.check_json:
        raise InterpscopeError("--texts needs --check-json FILE (or '-') for the check's document.")
    _check_options(args)
    texts = parse_examples(read_input_bytes(args.texts, "--texts"), Path(args.texts).name)
    check_out_file(args.check_json, "--check-json")
    lm = load_from_args(args)
    folder = args.transcoders or default_transcoder_set(lm.name)
    if folder is None:
        raise InterpscopeError(f"No transcoders for {lm.name}: none is shipped for it; pass --transcoders DIR.")
    transcoders = load_dictionary(folder, lm=lm)
    bar = tqdm(total=len(texts), desc="prompts (graph + ablation check)", file=sys.stderr)
    if args.convention != "interpscope":
        raise InterpscopeError("--texts runs the ablation check, which runs on the interpscope convention only.")
    conventional = _convention_options(args)
    options = dict(target=args.target, contrast=args.contrast, targets=args.targets, **conventional,
                   max_feature_nodes=args.max_feature_nodes, lrp=None, max_logits=args.max_logits,
                   logit_probability=args.logit_probability)
    try:
        result = ablation_check_set(lm, transcoders, texts, n=args.ablation_check, graph_options=options,
                                    progress=lambda done, total: bar.update(done - bar.n))
    finally:
        bar.close()
    emit_json(result, args.check_json)
    if args.check_json != "-":
        print(result.summary())
    return 0
