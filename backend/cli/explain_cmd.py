"""`interpscope explain`: which input tokens made the model predict its next token (AttnLRP and baselines)."""
from __future__ import annotations

import argparse
from pathlib import Path

from backend.cli.argtypes import non_negative_int
from backend.cli.common import add_model_args, check_out_file, emit_json, load_from_args
from backend.config import InterpscopeError


def register(subparsers: argparse._SubParsersAction) -> None:
    explain = subparsers.add_parser(
        "explain", help="relevance of each input token for the next-token prediction",
        description="Explain the model's next-token logit after a text with AttnLRP, CP-LRP or a captum "
                    "baseline; prints one relevance per token and, for LRP methods, the conservation readout.")
    add_model_args(explain)
    source = explain.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to explain")
    source.add_argument("--file", help="a .txt/.md file (whole file, or one line with --row), .csv (text column) "
                                       "or .jsonl (\"text\" field)")
    explain.add_argument("--row", type=non_negative_int, default=None,
                         help="which example of --file (0-based; default 0)")
    from backend.relevance import method_names

    explain.add_argument("--method", default=None, choices=method_names(),
                         help="default: the family's LRP method (attnlrp for transformers, mambalrp for Mamba)")
    target = explain.add_mutually_exclusive_group()
    target.add_argument("--target-token", help="explain this next token (text of one token, or #id) instead of "
                                               "the predicted one")
    target.add_argument("--contrast", nargs=2, metavar=("A", "B"), help="explain logit(A) - logit(B)")
    explain.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT ('-' for stdout)")
    explain.add_argument("--png", metavar="OUT", help="write the token heatmap image to OUT (.png, .svg or .pdf)")
    explain.set_defaults(func=run_explain)


def _text_from_args(args: argparse.Namespace) -> str:
    if args.text is not None:
        if args.row is not None:
            raise InterpscopeError("--row goes with --file, not with --text.")
        return args.text
    from backend.inputs import parse_examples

    path = Path(args.file)
    if not path.is_file():
        raise InterpscopeError(f"No such file: {args.file}")
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if args.row is None and suffix in (".txt", ".md", ".text", ""):
        from backend.inputs import decode_bytes

        return decode_bytes(data, name=path.name)
    examples = parse_examples(data, path.name)
    row = 0 if args.row is None else args.row
    if not 0 <= row < len(examples):
        raise InterpscopeError(f"--row {row} is out of range: {path.name} has {len(examples)} examples (0-{len(examples) - 1}).")
    return examples[row]


def run_explain(args: argparse.Namespace) -> int:
    from backend.inputs import check_text
    from backend.relevance.api import explain

    text = check_text(_text_from_args(args))
    if args.png and Path(args.png).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InterpscopeError("--png must end in .png, .svg or .pdf.")
    check_out_file(args.png, "--png")
    check_out_file(args.json, "--json")
    lm = load_from_args(args)
    if args.method is None:
        from backend.relevance.methods import methods_for

        args.method = methods_for(lm.adapter)[0].name
    result = explain(lm, text, args.method, token=args.target_token,
                     contrast=tuple(args.contrast) if args.contrast else None)
    if args.png:
        from backend.relevance.render import save_heatmap

        save_heatmap(args.png, result.tokens, result.relevance,
                     f"{result.method_label} relevance for {result.target.label} ({lm.name})", result.sink_positions)
    if args.json:
        emit_json(result, args.json)  # the one JSON path (backend.results.to_plain), as the page's export
    if args.json != "-":
        _print_human(result)
    return 0


def _print_human(result) -> None:
    target = result.target
    print(f"{result.method_label} on {result.model}: target {target.label} (id {target.token_id}) after position "
          f"{target.position}, {target.kind} {result.logit:.4f}, {result.seconds:.3f} s")
    for token, value in zip(result.tokens, result.relevance):
        print(f"{value:+10.4f}  {token!r}")
    if result.conservation is not None:
        c = result.conservation
        print(f"conservation: inputs {c.input_sum:.4f} + biases {c.bias_sum:.4f} + softmax {c.softmax_sum:.4f} "
              f"vs {c.target_logit:.4f} (relative error {c.relative_error:.2e})")
