"""`interpscope explain --faithfulness`: MoRF / LeRF areas and ABPC of a map on its own text (--text / --file), or the
whole held-out prompt set's ABPC table with bootstrap intervals (--set heldout)."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import non_negative_int, positive_int
from interpscope.config import InterpscopeError


def add_arguments(explain: argparse.ArgumentParser, source) -> None:
    """--set joins the text sources; the faithfulness group holds the rest."""
    from interpscope.relevance.heldout import SETS

    source.add_argument("--set", choices=list(SETS), help="a shipped prompt set (with --faithfulness): heldout = "
                                                          "assets/prompts/heldout-v1.jsonl")
    group = explain.add_argument_group("faithfulness (--faithfulness)")
    group.add_argument("--faithfulness", action="store_true",
                       help="print MoRF / LeRF AUC and ABPC (with a random-order control) for the map, tokens "
                            "removed to --baseline; with --set, the ABPC table of every method under every deletion "
                            "baseline with bootstrap 95%% intervals")
    group.add_argument("--curve-steps", type=positive_int, default=10, help="points per perturbation curve "
                                                                            "(default 10)")
    group.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random orders and the "
                                                                        "bootstrap (default 0)")
    group.add_argument("--limit", type=positive_int, default=None,
                       help="with --set: the first N prompts, taken from every category in turn")
    group.add_argument("--confident", action="store_true",
                       help="with --set: only the prompts whose expected token is the model's top-1")
    group.add_argument("--methods", nargs="+", default=None,
                       help="with --set: the methods to compare (default: every method the model serves)")
    group.add_argument("--baselines", nargs="+", default=None, choices=["zero", "pad", "mean"],
                       help="with --set: the deletion baselines (default: zero, pad, mean)")
    group.add_argument("--bootstrap", type=positive_int, default=2000, help="bootstrap resamples (default 2000)")


def wants_faithfulness(args: argparse.Namespace) -> bool:
    if getattr(args, "set", None) and not args.faithfulness:
        raise InterpscopeError("--set goes with --faithfulness (it runs the set's faithfulness table).")
    return bool(getattr(args, "faithfulness", False))


def run(args: argparse.Namespace, text: str | None, options, load, default_method) -> int:
    """Either a single map's curves (text given) or the set's table."""
    from interpscope.cli.common import check_outputs, write_outputs

    if args.all_rows or args.out:
        raise InterpscopeError("--faithfulness takes no --all-rows or --out (it writes --json, --csv, --png, --svg or "
                               "--html).")
    check_outputs(args)
    if args.set:
        return _run_set(args, load, write_outputs)
    for flag in ("limit", "methods", "baselines"):
        if getattr(args, flag):
            raise InterpscopeError(f"--{flag} goes with --set.")
    if args.confident:
        raise InterpscopeError("--confident goes with --set.")
    from interpscope.relevance.api import explain
    from interpscope.relevance.heldout import text_faithfulness

    lm = load(args)
    method = args.method or default_method(lm)
    result = explain(lm, text, method, token=args.target_token,
                     contrast=tuple(args.contrast) if args.contrast else None, options=options, top=0)
    curves = text_faithfulness(lm, result, baseline=args.baseline, steps=args.curve_steps, seed=args.seed)
    write_outputs(args, curves)
    if args.json != "-":
        print(f"{result.method_label} on {lm.name}: target {result.target.label}, {result.target.kind} "
              f"{result.logit:.4f}; tokens removed to the {curves.baseline} baseline, {curves.steps} steps")
        print(f"MoRF AUC {curves.morf_auc:.4f}  LeRF AUC {curves.lerf_auc:.4f}  ABPC {curves.abpc:.4f}  "
              f"(random order: {curves.random_abpc:.4f} [{curves.random_ci_low:.4f}, {curves.random_ci_high:.4f}] "
              f"over {curves.random_orders} orders)")
    return 0


def _run_set(args: argparse.Namespace, load, write_outputs) -> int:
    from tqdm import tqdm

    from interpscope.relevance.heldout import choose, load_set, run_heldout

    if args.target_token or args.contrast or args.row is not None:
        raise InterpscopeError("--set explains each prompt's expected token: it takes no --target-token, "
                               "--contrast or --row.")
    prompts = choose(load_set(args.set), limit=args.limit, confident=args.confident)
    if not prompts:
        raise InterpscopeError("No prompt of the set is left with these filters.")
    lm = load(args)
    bar = tqdm(total=len(prompts), desc="prompts", unit="prompt", file=sys.stderr)
    result = run_heldout(lm, prompts, methods=args.methods, baselines=args.baselines, ig_steps=args.ig_steps,
                         curve_steps=args.curve_steps, seed=args.seed, bootstrap=args.bootstrap, set_name=args.set,
                         progress=lambda done, total: bar.update(done - bar.n))
    bar.close()
    write_outputs(args, result)
    if args.json != "-":
        print_table(result)
    return 0


def print_table(result) -> None:
    """The ABPC table, the model's accuracy and the diagnosis sentence, as text."""
    s = result.settings
    print(f"{result.set} on {result.model}: {len(result.rows)} prompts; target {s.target}; {s.removal}; "
          f"IG {s.ig_steps} steps; {s.curve_steps} curve steps; bootstrap {s.bootstrap} (seed {s.seed}); "
          f"{result.cpu_seconds:.0f} s CPU, {result.seconds:.0f} s wall")
    for subset in dict.fromkeys(t["subset"] for t in result.table):
        for baseline in s.baselines:
            rows = sorted((t for t in result.table if t["subset"] == subset and t["baseline"] == baseline),
                          key=lambda t: t["rank"])
            if not rows:
                continue
            print(f"\n{subset} prompts (n={rows[0]['n']}), {baseline} baseline: mean ABPC [95% interval]")
            for t in rows:
                print(f"  {t['rank']}. {t['label']:<24} {t['mean_abpc']:8.3f} "
                      f"[{t['ci_low']:7.3f}, {t['ci_high']:7.3f}]")
    for t in sorted((t for t in result.fixed_sinks_table if t["subset"] == "all"), key=lambda t: t["rank"]):
        if t["rank"] == 1:
            print(f"\nposition 0 (and any measured sink) kept in place ({t['baseline']} baseline):")
        print(f"  {t['rank']}. {t['label']:<24} {t['mean_abpc']:8.3f} [{t['ci_low']:7.3f}, {t['ci_high']:7.3f}]")
    print("\nmodel top-1 = expected: " + ", ".join(
        f"{k} {v['correct']}/{v['n']}" for k, v in result.accuracy.items()))
    if result.sentence:
        print("\n" + result.sentence)
