"""`interpscope heads`: every attention head's pattern on a text (--text), or the head finder (--find: induction,
previous-token and duplicate-token scores against chance, with optional ablation of the top induction heads)."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import int_between, seed_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_outputs,
    check_run_memory,
    load_from_args,
    write_outputs,
)
from interpscope.config import InterpscopeError


def register(subparsers) -> None:
    heads = subparsers.add_parser(
        "heads", help="attention patterns of every head, or the head finder",
        description="--text T: every head's attention pattern on T (sinks measured and named; the document holds "
                    "per-head summaries and the full pattern of each --head). --find: every head scored for "
                    "induction, previous-token and duplicate-token behaviour on repeated random tokens, beside a "
                    "uniform causal pattern's score; --ablate K also measures repetition accuracy with the top K "
                    "induction heads ablated against K random heads.")
    add_model_args(heads)
    what = heads.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="the text whose attention patterns to read")
    what.add_argument("--find", action="store_true", help="score every head (head finder)")
    heads.add_argument("--head", action="append", default=[], metavar="L.H",
                       help="with --text: include this head's full pattern in the JSON (repeatable)")
    heads.add_argument("--all-patterns", action="store_true", help="with --text: include every head's pattern")
    heads.add_argument("--sequences", type=int_between(1, 64), default=8, help="--find: random sequences (8)")
    heads.add_argument("--half-len", type=int_between(2, 256), default=40, help="--find: tokens per copy (40)")
    heads.add_argument("--seed", type=seed_int, default=0, help="--find: random seed (0)")
    heads.add_argument("--ablate", type=int_between(0, 10_000), default=0, metavar="K",
                       help="--find: ablate the top K induction heads and K random heads (5 draws); 0: no ablation")
    heads.add_argument("--ablation", choices=["zero", "mean"], default="zero", help="--find: how heads are ablated")
    from interpscope.heads.finder import HeadScores
    from interpscope.heads.patterns import HeadPatterns

    add_outputs(heads, HeadPatterns, HeadScores)
    heads.set_defaults(func=run_heads)


def _check(args: argparse.Namespace) -> None:
    finder_only = [flag for flag, given in (("--ablate", args.ablate), ("--sequences", args.sequences != 8),
                                            ("--half-len", args.half_len != 40), ("--seed", args.seed != 0),
                                            ("--ablation", args.ablation != "zero")) if given]
    if args.text is not None and finder_only:
        raise InterpscopeError(f"{', '.join(finder_only)} belong(s) to --find, not --text.")
    if args.find and (args.head or args.all_patterns):
        raise InterpscopeError("--head and --all-patterns belong to --text, not --find.")


def run_heads(args: argparse.Namespace) -> int:
    from interpscope.inputs import check_text

    _check(args)
    if args.text is not None:
        check_text(args.text)
    check_outputs(args)
    lm = load_from_args(args)
    if args.find:
        return _find(lm, args)
    from interpscope.heads.patterns import head_patterns, parse_head

    adapter = lm.adapter
    if "attention" not in adapter.capabilities():
        raise InterpscopeError(f"{lm.name} ({lm.family}) has no attention heads.")
    for name in args.head:
        parse_head(name, adapter.n_layers, adapter.n_heads)
    result = head_patterns(lm, args.text, heads=args.head)
    if args.all_patterns:
        result = result.with_heads([(layer, head) for layer in range(result.n_layers)
                                    for head in range(result.n_heads)])
    write_outputs(args, result)
    if args.json != "-":
        print(f"{len(result.tokens)} tokens, {result.n_layers} x {result.n_heads} heads on {result.model}, "
              f"{result.seconds:.2f} s; excluded: " + (", ".join(f"{r['position']} {r['token']!r} ({r['reason']})"
                                                                 for r in result.sinks) or "none"))
        rows = sorted(result.tidy(), key=lambda r: -r["previous_token"])[:5]
        print(f"most previous-token heads (uniform causal pattern {result.chance['previous_token']:.3f}): " +
              ", ".join(f"{r['layer']}.{r['head']} {r['previous_token']:.3f}" for r in rows))
    return 0


def _find(lm, args: argparse.Namespace) -> int:
    from interpscope.heads.finder import KINDS, LABELS, find_heads
    check_run_memory(lm, "heads", tokens=2 * args.half_len, sequences=args.sequences)
    result = find_heads(lm, n_sequences=args.sequences, half_len=args.half_len, seed=args.seed,
                        ablate=args.ablate, mode=args.ablation)
    write_outputs(args, result)
    if args.json != "-":
        print(f"head finder on {result.model}: {args.sequences} sequences of 2 x {args.half_len} random tokens, "
              f"{result.seconds:.2f} s")
        for kind in KINDS:
            print(f"{LABELS[kind]:>16} (chance {result.chance[kind]:.3f}): " + ", ".join(
                f"{r['layer']}.{r['head']} {r['score']:.3f}" for r in result.top(kind, 5)))
        if result.ablation:
            a = result.ablation
            print(f"repetition accuracy: clean {a['clean_accuracy']:.3f}; top {a['k']} induction heads "
                  f"{a['mode']}-ablated {a['ablated_accuracy']:.3f}; {a['k']} random heads "
                  f"{a['random_accuracy_mean']:.3f} (mean of {len(a['random'])})")
    return 0
