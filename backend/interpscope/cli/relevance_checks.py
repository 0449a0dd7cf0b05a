"""The relevance page's checks on the command line, each writing the same document as the page's export:

- `explain --text T --ig-convergence`: Integrated Gradients' completeness gap at 8..128 steps and the target along
  the path (the page's "Run the convergence check"; schema interpscope.ig_convergence);
- `explain --text T --faithfulness --compare [--methods M ...]`: MoRF / LeRF curves of every method on one input
  (the page's "Curves for every method on this input"; schema interpscope.faithfulness_comparison);
- `explain --file F --all-rows --faithfulness` or `explain --sample N --faithfulness`: mean ABPC of each method over
  many texts (the page's "Batch faithfulness over many texts"; schema interpscope.faithfulness_batch);
- `explain --text T --experts` on a mixture of experts: how much relevance each expert carried per token and sparse
  layer, beside the router's weight share (the page's per-expert section; schema interpscope.expert_relevance).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope.cli.argtypes import positive_int
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

BATCH_LIMIT = 200  # the page's cap on a batch's texts; more are refused here, never cut silently


def add_arguments(explain: argparse.ArgumentParser, source) -> None:
    """--sample joins the text sources; --ig-convergence and --compare go with the faithfulness group."""
    source.add_argument("--sample", type=positive_int, metavar="N",
                        help="the first N bundled sample prompts (Austen, test split), with --faithfulness: the "
                             "batch faithfulness summary")
    explain.add_argument("--ig-convergence", action="store_true",
                         help="Integrated Gradients' completeness gap at 8/16/32/64/128 steps from --baseline and the "
                              "target along the straight path (the page's convergence check)")
    explain.add_argument("--experts", action="store_true",
                         help="a mixture-of-experts model's per-expert relevance (each expert's share per token and "
                              "sparse layer, beside its router-weight share), as the page's expert section")
    explain.add_argument("--compare", action="store_true",
                         help="with --faithfulness and --text: the curves of every method the model serves (or "
                              "--methods) on this input, as the page's 'Curves for every method'")


def wanted(args: argparse.Namespace) -> bool:
    """Whether one of these checks was asked for (they take over the explain command)."""
    return bool(args.ig_convergence or args.compare or args.sample or args.experts
                or (args.faithfulness and args.all_rows and args.set is None))


def _batch_texts(args: argparse.Namespace, read_bytes: Callable[[str], bytes]) -> list[str]:
    if args.sample:
        from interpscope.corpus import sample_prompts

        texts = sample_prompts(args.sample)
        if len(texts) < args.sample:
            raise InterpscopeError(f"--sample {args.sample}: the bundled test split has only {len(texts)} prompts.")
    else:
        from interpscope.uploads import parse_examples

        if args.file is None:
            raise InterpscopeError("--all-rows with --faithfulness needs --file (one example per line or row).")
        texts = parse_examples(read_bytes(args.file), Path(args.file).name, text_column=args.text_column)
    if len(texts) > BATCH_LIMIT:
        raise InterpscopeError(f"A faithfulness batch takes at most {BATCH_LIMIT} texts; this one has {len(texts)}. "
                               f"Split the file.")
    return texts


def run(args: argparse.Namespace, text_of: Callable[[], str], load: Callable[[argparse.Namespace], LoadedModel],
        default_method: Callable[[LoadedModel], str], read_bytes: Callable[[str], bytes]) -> int:
    from interpscope.cli.common import check_outputs, write_outputs

    if args.out:
        raise InterpscopeError("--ig-convergence, --compare, --experts and a faithfulness batch take no --out (they "
                               "write --json, --csv, --png, --svg or --html).")
    if args.ig_convergence and (args.faithfulness or args.compare):
        raise InterpscopeError("--ig-convergence is a check of its own: it takes no --faithfulness or --compare.")
    if args.experts and (args.faithfulness or args.compare or args.ig_convergence):
        raise InterpscopeError("--experts is a view of its own: it takes no --faithfulness, --compare or "
                               "--ig-convergence.")
    if args.compare and not args.faithfulness:
        raise InterpscopeError("--compare goes with --faithfulness (it compares the methods' curves).")
    batch = bool(args.sample or args.all_rows)
    if batch and (args.ig_convergence or args.compare or args.experts):
        raise InterpscopeError("--sample / --all-rows run the batch summary: they take no --ig-convergence or "
                               "--compare.")
    if args.sample and not args.faithfulness:
        raise InterpscopeError("--sample goes with --faithfulness (the batch faithfulness summary).")
    check_outputs(args)
    if batch:
        return _run_batch(args, load, default_method, read_bytes, write_outputs)
    text = text_of()
    lm = load(args)
    if args.ig_convergence:
        return _run_convergence(args, lm, text, write_outputs)
    if args.experts:
        return _run_experts(args, lm, text, default_method(lm), write_outputs)
    return _run_compare(args, lm, text, write_outputs)


def _run_experts(args, lm: LoadedModel, text: str, default: str, write_outputs) -> int:
    from interpscope.api import explain_experts

    result = explain_experts(lm, text, args.method or default, target=args.target_token,
                             contrast=tuple(args.contrast) if args.contrast else None, prepend_bos=args.prepend_bos)
    write_outputs(args, result)
    if args.json != "-":
        for sentence in result.readings():
            print(sentence)
        print(f"closure: the experts' shares add up to the relevance at each block's output to "
              f"{result.closure:.1e} of the logit")
    return 0


def _run_convergence(args, lm: LoadedModel, text: str, write_outputs) -> int:
    from tqdm import tqdm

    from interpscope.cli.method_options import options_from_args
    from interpscope.relevance.api import ig_convergence

    bar = tqdm(total=6, desc="IG step counts", file=sys.stderr)
    result = ig_convergence(lm, text, token=args.target_token,
                            contrast=tuple(args.contrast) if args.contrast else None,
                            options=options_from_args(args), prepend_bos=args.prepend_bos,
                            progress=lambda done, total: bar.update(done - bar.n))
    bar.close()
    write_outputs(args, result)
    if args.json != "-":
        print(f"IG from the {result.baseline_label} on {lm.name}: target {result.target}; "
              f"f(x) {result.value:.4f}, f(baseline) {result.baseline_value:.4f}")
        for row in result.rows:
            print(f"  {row['steps']:>4} steps: relevance sum {row['relevance_sum']:+.4f}  gap {row['gap']:+.4f} "
                  f"({100 * row['relative_gap']:.1f}%)")
        print("the gap shrinks with more steps" if result.shrinks else
              "the gap does not shrink with more steps: the path, not the step count, limits IG here")
    return 0


def _methods(args, lm: LoadedModel) -> list[str]:
    from interpscope.relevance import methods_for

    served = [spec.name for spec in methods_for(lm.adapter)]
    chosen = args.methods or served
    unknown = [m for m in chosen if m not in served]
    if unknown:
        raise InterpscopeError(f"{lm.name} does not serve {', '.join(unknown)}; it serves {', '.join(served)}.")
    return list(chosen)


def _run_compare(args, lm: LoadedModel, text: str, write_outputs) -> int:
    from tqdm import tqdm

    from interpscope.cli.method_options import options_from_args
    from interpscope.relevance.api import explain
    from interpscope.relevance.heldout import compare_faithfulness

    methods = _methods(args, lm)
    options = options_from_args(args)  # --ig-steps, --occlusion-window; --baseline is IG's start and the deletion's
    maps = []
    for method in tqdm(methods, desc="methods", file=sys.stderr):
        maps.append(explain(lm, text, method, token=args.target_token,
                            contrast=tuple(args.contrast) if args.contrast else None, prepend_bos=args.prepend_bos,
                            top=0, options=options))
    comparison = compare_faithfulness(lm, maps, baseline=args.baseline or "zero", steps=args.curve_steps,
                                      seed=args.seed)
    write_outputs(args, comparison)
    if args.json != "-":
        print(f"{len(maps)} methods on {lm.name}: target {maps[0].target.label}; tokens removed to the "
              f"{comparison.baseline} baseline")
        for curve in sorted(comparison.curves, key=lambda c: -c.abpc):
            settings = ", ".join(f"{k} {v}" for k, v in (curve.settings or {}).items())
            print(f"  {curve.method_label:<24} ABPC {curve.abpc:+.4f}  (random order {curve.random_abpc:+.4f})"
                  + (f"  [{settings}]" if settings else ""))
    return 0


def _run_batch(args, load, default_method, read_bytes, write_outputs) -> int:
    from tqdm import tqdm

    from interpscope.relevance.api import faithfulness_batch

    for flag in ("target_token", "contrast", "compare"):
        if getattr(args, flag):
            raise InterpscopeError(f"A faithfulness batch explains each text's predicted token: it takes no "
                                   f"--{flag.replace('_', '-')}.")
    texts = _batch_texts(args, read_bytes)
    if not texts:
        raise InterpscopeError("No text to run the batch on.")
    lm = load(args)
    methods = _methods(args, lm)
    bar = tqdm(total=len(texts), desc="texts", unit="text", file=sys.stderr)
    summary = faithfulness_batch(lm, texts, methods, steps=args.curve_steps,
                                 progress=lambda done, total: bar.update(done - bar.n))
    bar.close()
    write_outputs(args, summary)
    if args.json != "-":
        print(f"mean ABPC over {summary.n_texts} texts on {lm.name}:")
        for method in sorted(methods, key=lambda m: -summary.mean_abpc[m]):
            print(f"  {method:<24} {summary.mean_abpc[method]:+.4f} (std {summary.std_abpc[method]:.4f})")
    return 0
