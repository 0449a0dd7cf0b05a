"""`interpscope patch`: activation patching of a clean / corrupt prompt pair (residual stream, attention and MLP
outputs, heads), attribution patching and relevance patching beside it, or path patching between two components."""
from __future__ import annotations

import argparse
import sys

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
    patch.add_argument("--clean", help="the clean prompt (its answer is restored)")
    patch.add_argument("--corrupt", help="the corrupt prompt, same token length")
    patch.add_argument("--pairs", metavar="FILE",
                       help="instead of --clean/--corrupt: a set of pairs of one template (.jsonl objects or .csv "
                            "columns clean, corrupt, optional answer, wrong; or 'ioi', the shipped six IOI pairs): the "
                            "mean grid over the pairs and its spread (schema interpscope.patching_set)")
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
    from interpscope.patching.dataset import PatchingSetResult
    from interpscope.patching.results import PatchingResult, PathPatchingResult

    add_outputs(patch, PatchingResult, PathPatchingResult, PatchingSetResult)
    patch.set_defaults(func=run_patch)


def run_patch(args: argparse.Namespace) -> int:
    from interpscope.inputs import check_text
    from interpscope.patching.run import KINDS, METHODS, parse_list

    components = parse_list(args.components, KINDS, "components")
    methods = parse_list(args.methods, METHODS, "methods")
    if args.pairs is not None:
        return _run_set(args, components, methods)
    if args.clean is None or args.corrupt is None:
        raise InterpscopeError("Give --clean and --corrupt (one pair), or --pairs FILE (a set of pairs).")
    check_text(args.clean)
    check_text(args.corrupt)
    check_outputs(args)
    lm = load_from_args(args)
    from interpscope.patching.prompts import prompt_pair

    prompt_pair(lm, args.clean, args.corrupt, args.prepend_bos)  # a pair refused (lengths, equal) is refused first
    check_run_memory(lm, "patching", args.clean)
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


def _run_set(args: argparse.Namespace, components: list[str], methods: list[str]) -> int:
    """--pairs: every pair patched, the mean grid and its spread (interpscope.patching.dataset)."""
    from pathlib import Path

    from tqdm import tqdm

    from interpscope.cli.common import read_input_bytes
    from interpscope.patching.dataset import patch_set, read_pairs, shipped_pairs

    for flag in ("clean", "corrupt", "path", "answer", "wrong"):
        if getattr(args, flag) is not None:
            raise InterpscopeError(f"--pairs takes no --{flag} (each pair carries its own answer and wrong tokens).")
    if args.pairs == "ioi" and not Path(args.pairs).exists():
        pairs = shipped_pairs("ioi")
    else:
        pairs = read_pairs(read_input_bytes(args.pairs, "--pairs"), Path(args.pairs).name)
    check_outputs(args)
    lm = load_from_args(args)
    bar = tqdm(total=len(pairs), desc="pairs", file=sys.stderr)
    try:
        result = patch_set(lm, pairs, metric=args.metric, components=components, methods=methods,
                           relp_rules=args.relp_rules, prepend_bos=args.prepend_bos,
                           progress=lambda done, total: bar.update(done - bar.n))
    finally:
        bar.close()
    write_outputs(args, result)
    if args.json != "-":
        print(f"{result.metric_label} on {result.model}, {result.n_pairs} pairs ({result.seconds:.1f} s)")
        for sentence in result.summary():
            print(sentence)
    return 0
