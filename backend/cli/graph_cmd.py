"""`interpscope graph`: the attribution graph of a prediction over per-layer transcoders (schema interpscope.graph)."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import int_at_least
from interpscope.cli.common import add_model_args, check_out_file, emit_json, load_from_args


def register(subparsers) -> None:
    from interpscope.graphs.defaults import (
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
        "graph", help="attribution graph of a prediction over per-layer transcoders",
        description="Trace the next-token logit after a text through the transcoder replacement model (attention "
                    "patterns and norm scales frozen, an error node per layer and position): embedding, feature, "
                    "error and logit nodes with direct-effect edges, pruned by influence; replacement and "
                    f"completeness scores; LRP edges into the logit beside them. Texts up to {MAX_TOKENS} tokens.")
    add_model_args(graph)
    graph.add_argument("--text", required=True, help="the prompt")
    graph.add_argument("--target", help="the next token to explain (text of one token, or #id; default: the top one)")
    graph.add_argument("--node-budget", type=int_at_least(1), default=DEFAULT_NODE_BUDGET,
                       help=f"feature and error nodes kept (default {DEFAULT_NODE_BUDGET})")
    graph.add_argument("--edge-budget", type=int_at_least(1), default=DEFAULT_EDGE_BUDGET,
                       help=f"edges kept (default {DEFAULT_EDGE_BUDGET})")
    graph.add_argument("--max-feature-nodes", type=int_at_least(1), default=DEFAULT_MAX_FEATURE_NODES,
                       help=f"features whose inputs are computed, most influential first "
                            f"(default {DEFAULT_MAX_FEATURE_NODES})")
    graph.add_argument("--max-logits", type=int_at_least(1), default=DEFAULT_MAX_LOGITS,
                       help=f"logit nodes: 1 (default) traces the target alone; up to {MAX_LOGITS} adds the most "
                            f"probable other next tokens until they cover --logit-probability, influence weighted by "
                            f"their probabilities (circuit-tracer's top logits)")
    graph.add_argument("--logit-probability", type=float, default=DEFAULT_LOGIT_PROBABILITY,
                       help=f"with --max-logits above 1: the next-token probability the logit nodes cover "
                            f"(default {DEFAULT_LOGIT_PROBABILITY})")
    graph.add_argument("--transcoders", metavar="DIR",
                       help="a transcoder set folder (manifest.json + layer_XX/); default: the set shipped for the "
                            "model")
    # the registry's transformer LRP rule sets (the graph runs on attention models), never typed here
    lrp_names = [m.name for m in rule_methods() if "transformer_lrp" in m.requires]
    graph.add_argument("--lrp", choices=[*lrp_names, "none"], default=lrp_names[0],
                       help=f"LRP method for the LRP edges into the logit (default {lrp_names[0]})")
    graph.add_argument("--lrp-features", type=int_at_least(0), default=0,
                       help="also the LRP edges into this many kept features, most influential first (one more LRP "
                            "pass each; default 0)")
    graph.add_argument("--json", metavar="OUT", help="write JSON to OUT ('-' for stdout)")
    graph.set_defaults(func=run_graph)


def run_graph(args: argparse.Namespace) -> int:
    from interpscope.config import InterpscopeError
    from interpscope.graphs.build import build_graph
    from interpscope.inputs import check_text
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    check_text(args.text)
    check_out_file(args.json, "--json")
    lm = load_from_args(args)
    folder = args.transcoders or default_transcoder_set(lm.name)
    if folder is None:
        raise InterpscopeError(f"No transcoders for {lm.name}: none is shipped for it; pass --transcoders DIR (a "
                               f"set folder, e.g. from scripts/train_transcoders.py).")
    transcoders = load_transcoder_set(folder, lm=lm)
    result = build_graph(lm, transcoders, args.text, target=args.target, node_budget=args.node_budget,
                         edge_budget=args.edge_budget, max_feature_nodes=args.max_feature_nodes,
                         lrp=None if args.lrp == "none" else args.lrp, lrp_features=args.lrp_features,
                         max_logits=args.max_logits, logit_probability=args.logit_probability)
    if args.json:
        emit_json(result, args.json)
    if args.json != "-":
        target = result.target
        print(f"Attribution graph of {target['token']!r} (p = {target['probability']:.3f}) on {result.model}: "
              f"logit {result.logit:.4f}, direct contributions sum to {result.logit_inputs_sum:.4f}; "
              f"{len(result.nodes)} nodes, {len(result.edges)} edges kept of {result.n_active_features} active "
              f"features ({result.n_expanded_features} expanded); replacement score "
              f"{result.replacement_score:.3f}, completeness {result.completeness_score:.3f}; "
              f"{result.seconds:.1f} s")
        if result.logits:
            print(f"{len(result.logits)} logit nodes: " + ", ".join(
                f"{entry['token']!r} p {entry['probability']:.3f} (weight {entry['weight']:.3f})"
                for entry in result.logits))
    return 0
