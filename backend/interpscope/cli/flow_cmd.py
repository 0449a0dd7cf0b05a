"""`interpscope flow`: how information flows to one prediction (logit lens, per-layer contributions, the AttnLRP
relevance graph of heads and MLPs)."""
from __future__ import annotations

import argparse

from interpscope.cli.common import add_model_args, add_outputs, check_outputs, load_from_args, write_outputs


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def register(subparsers) -> None:
    flow = subparsers.add_parser("flow", help="logit lens, layer contributions and relevance graph of a prediction",
                                 description="For the next token after a text: the target's probability and rank "
                                             "after every block (logit lens), each layer's attention and MLP "
                                             "contribution to its logit, and the heads and MLPs whose AttnLRP "
                                             "relevance exceeds --threshold x the logit, with token edges.")
    add_model_args(flow)
    flow.add_argument("--text", required=True, help="the prompt")
    target = flow.add_mutually_exclusive_group()
    target.add_argument("--target-token", help="explain this next token (text of one token, or #id)")
    target.add_argument("--contrast", nargs=2, metavar=("A", "B"), help="explain logit(A) - logit(B)")
    flow.add_argument("--threshold", type=_fraction, default=0.05,
                      help="keep heads/MLPs with |relevance| >= this fraction of |value| (default 0.05)")
    flow.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                      help="put the model's prefix token before the text, as every view does by default "
                           "(--no-prepend-bos: the text alone; the document says which in bos_prepended)")
    flow.add_argument("--lens", choices=["logit", "tuned"], default="logit",
                      help="tuned: also the shipped tuned lens beside the logit lens, per-layer KL to the final "
                           "distribution (document key tuned_lens)")
    from interpscope.flow.information import InformationFlow

    add_outputs(flow, InformationFlow)
    flow.set_defaults(func=run_flow)


def run_flow(args: argparse.Namespace) -> int:
    from interpscope.flow.information import information_flow
    from interpscope.inputs import check_text

    check_text(args.text)
    check_outputs(args)
    lm = load_from_args(args)
    result = information_flow(lm, args.text, token=args.target_token,
                              contrast=tuple(args.contrast) if args.contrast else None, lens=args.lens,
                              prepend_bos=args.prepend_bos)
    write_outputs(args, result.at(args.threshold))  # the flow's document (schema interpscope.flow), table, figure
    if args.json != "-":
        last = result.tidy()[-1]
        print(f"{result.method} flow to {result.target.label} on {result.model}: {result.target.kind} "
              f"{result.value:.4f}, p = {last['probability']:.4f} (rank {last['rank']}), {result.seconds:.2f} s")
        for row in result.tidy():
            attn, mlp = row["attention_contribution"], row["mlp_contribution"]
            parts = "" if attn is None else f"  attention {attn:+8.3f}  MLP {mlp:+8.3f}"
            print(f"{row['step']:>12}: p {row['probability']:.4f} rank {row['rank']:>6}{parts}")
        if result.tuned_lens is not None:
            print(f"KL to the final distribution (nats, mean over {len(result.tuned_lens.positions)} positions):")
            for row in result.tuned_lens.tidy():
                print(f"{row['step']:>12}: logit lens {row['kl_logit']:8.3f}  tuned lens {row['kl_tuned']:8.3f}  "
                      f"top {row['top_logit']!r} / {row['top_tuned']!r}")
            print(result.tuned_lens.sentence())
    return 0
