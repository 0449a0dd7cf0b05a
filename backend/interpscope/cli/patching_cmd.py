"""`interpscope patch`: activation patching of a clean / corrupt prompt pair (residual stream, attention and MLP
outputs, heads), attribution patching and relevance patching beside it, or path patching between two components."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.common import add_model_args, add_outputs, check_outputs, load_from_args, write_outputs


def register(subparsers) -> None:
    from interpscope.patching.attribution import DEFAULT_RELP_RULES, RELP_RULES

    patch = subparsers.add_parser(
        "patching", aliases=["patch"],
        help="activation patching of a clean / corrupt prompt pair (and AtP / RelP estimates)",
        description="Run the corrupt prompt with one clean activation put back at a time (residual stream per layer "
                    "and position, attention and MLP outputs, each head) and report how much of the clean metric "
                    "it restores (1 = clean, 0 = corrupt), beside attribution patching (gradients) and relevance "
                    "patching (LRP) estimates with their Pearson r against real patching. With --path SENDER "
                    "RECEIVER: path patching between two components instead. Both prompts must have the same "
                    "number of tokens.")
    add_model_args(patch)
    patch.add_argument("--clean", required=True, help="the clean prompt (its answer is restored)")
    patch.add_argument("--corrupt", required=True, help="the corrupt prompt, same token length")
    patch.add_argument("--metric", default="logit-diff", choices=["logit-diff", "logit", "prob"],
                       help="logit-diff: logit(answer) - logit(wrong) (default); logit / prob: of the answer")
    patch.add_argument("--answer", help="the answer token (text of one token, or #id; default: the clean prompt's "
                                        "top prediction)")
    patch.add_argument("--wrong", help="the wrong token for logit-diff (default: the corrupt prompt's top prediction)")
    patch.add_argument("--components", default="resid,attn,mlp,heads",
                       help="comma-separated: resid, attn, mlp, heads (default all)")
    patch.add_argument("--method", "--methods", dest="methods", default="real,atp,relp",
                       help="comma-separated: real (activation patching), atp (attribution patching), relp "
                            "(relevance patching) (default all three)")
    patch.add_argument("--relp-rules", default=DEFAULT_RELP_RULES, choices=list(RELP_RULES),
                       help=f"LRP rules for RelP's backward pass (default {DEFAULT_RELP_RULES})")
    patch.add_argument("--path", nargs=2, metavar=("SENDER", "RECEIVER"),
                       help="path patching instead of the grids: L<l>.H<h>, L<l>.attn, L<l>.mlp (receiver also "
                            "'logits')")
    patch.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                       help="put the model's BOS first in both prompts (default: where the tokenizer adds none)")
    from interpscope.patching.results import PatchingResult, PathPatchingResult

    add_outputs(patch, PatchingResult, PathPatchingResult)
    patch.set_defaults(func=run_patch)


def run_patch(args: argparse.Namespace) -> int:
    from interpscope.inputs import check_text
    from interpscope.patching.run import KINDS, METHODS, parse_list

    check_text(args.clean)
    check_text(args.corrupt)
    components = parse_list(args.components, KINDS, "components")
    methods = parse_list(args.methods, METHODS, "methods")
    check_outputs(args)
    lm = load_from_args(args)
    common = dict(metric=args.metric, answer=args.answer, wrong=args.wrong, prepend_bos=args.prepend_bos)
    if args.path:
        from interpscope.patching.run import path_patch

        path = path_patch(lm, args.clean, args.corrupt, args.path[0], args.path[1], **common)
        write_outputs(args, path)
        if args.json != "-":
            print(f"{path.metric_label}: clean {path.clean_value:.4f}, corrupt {path.corrupt_value:.4f}")
            print(path.summary())
        return 0
    from tqdm import tqdm

    from interpscope.patching.run import patch

    bars: list = []  # made at the first progress call: a pair refused before any patched run leaves no bar behind

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc="patched runs", file=sys.stderr))
        bars[0].n = done
        bars[0].refresh()

    try:
        result = patch(lm, args.clean, args.corrupt, components=components, methods=methods,
                       relp_rules=args.relp_rules, progress=progress, **common)
    finally:
        for bar in bars:
            bar.close()
    write_outputs(args, result)
    if args.json != "-":
        print(f"{result.metric_label} on {result.model}: clean {result.clean_value:.4f}, corrupt "
              f"{result.corrupt_value:.4f} ({result.seconds['total']:.1f} s)")
        for sentence in result.summary():
            print(sentence)
    return 0
