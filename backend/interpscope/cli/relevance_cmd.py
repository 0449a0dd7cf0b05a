"""`interpscope explain`: which input tokens made the model predict its next token (AttnLRP and baselines)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope.cli.argtypes import non_negative_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    asked_outputs,
    check_out_folder,
    check_outputs,
    check_run_memory,
    json_to_stdout,
    load_from_args,
    read_input_bytes,
    write_outputs,
)
from interpscope.cli.method_options import add_method_options, options_from_args
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def register(subparsers: argparse._SubParsersAction) -> None:
    explain = subparsers.add_parser(
        "relevance", aliases=["explain"], help="relevance of each input token for the next-token prediction",
        description="Explain the model's next-token logit after a text with AttnLRP, CP-LRP or a captum "
                    "baseline; prints one relevance per token and, for LRP methods, the conservation readout.")
    add_model_args(explain)
    source = explain.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to explain")
    source.add_argument("--file", help="a .txt/.md file (whole file, or one line with --row), .csv (text column) "
                                       "or .jsonl (\"text\" field)")
    source.add_argument("--image", help="a PNG or JPEG image, for a ViT/DeiT image classifier (see --target-class)")
    explain.add_argument("--row", type=non_negative_int, default=None,
                         help="which example of --file (0-based; default 0)")
    from interpscope.relevance import method_names

    explain.add_argument("--method", default=None, choices=method_names(),
                         help="default: the family's LRP method (attnlrp for transformers, mambalrp for Mamba)")
    target = explain.add_mutually_exclusive_group()
    target.add_argument("--target-token", help="explain this next token (text of one token, or #id) instead of "
                                               "the predicted one")
    target.add_argument("--contrast", nargs=2, metavar=("A", "B"), help="explain logit(A) - logit(B)")
    add_outputs(explain, *result_classes(), figure_help={
        "png": "write the figure as an image to FILE; for one text's map: the token heatmap, its format from the "
               "suffix (.png, .svg or .pdf)"})
    explain.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                         help="put the model's BOS token before the text so the first word is explained like any "
                              "other (default: on where the tokenizer adds no BOS itself, e.g. SmolLM2)")
    add_method_options(explain)  # each registered method's own options (--ig-steps, --baseline, ...)
    from interpscope.cli.relevance_seq2seq import add_arguments as add_seq2seq

    add_seq2seq(explain)  # --decoder-text: encoder-decoders (T5)
    whole = explain.add_argument_group("a whole file (--file F --all-rows --out DIR)")
    whole.add_argument("--all-rows", action="store_true",
                       help="explain every row of --file (resumable; writes rows, aggregates, a tidy CSV and figures)")
    whole.add_argument("--out", metavar="DIR", help="folder for --all-rows (created; never deletes foreign files)")
    whole.add_argument("--text-column", help="CSV column holding the texts (default 'text', else the first)")
    whole.add_argument("--label-column", help="CSV column to aggregate by (default: label/class/category/target)")
    whole.add_argument("--force", action="store_true", help="restart an --all-rows run made with other settings")
    from interpscope.cli.relevance_faithfulness import add_arguments as add_faithfulness

    add_faithfulness(explain, source)
    from interpscope.cli.relevance_checks import add_arguments as add_checks

    add_checks(explain, source)
    from interpscope.cli.relevance_image import add_arguments as add_image

    add_image(explain)  # --target-class, --reference, --patch-flipping: images (ViT, DeiT)
    explain.set_defaults(func=run_explain)


def result_classes() -> tuple[type, ...]:
    """Every document the command writes, one per mode: one text's map, an encoder-decoder's, an image's, patch
    flipping, the IG convergence check, per-expert relevance and the faithfulness views."""
    from interpscope.relevance.api import FaithfulnessSummary, RelevanceResult
    from interpscope.relevance.baselines import IGConvergence
    from interpscope.relevance.experts import ExpertRelevance
    from interpscope.relevance.heldout import FaithfulnessComparison, HeldoutResult, TextFaithfulness
    from interpscope.relevance.image_api import ImageRelevance
    from interpscope.relevance.image_faithfulness import ImageFaithfulness
    from interpscope.relevance.seq2seq import Seq2SeqRelevance

    return (RelevanceResult, Seq2SeqRelevance, ImageRelevance, ImageFaithfulness, IGConvergence, ExpertRelevance,
            FaithfulnessComparison, FaithfulnessSummary, TextFaithfulness, HeldoutResult)


def _options(args: argparse.Namespace):
    return options_from_args(args)


def _text_from_args(args: argparse.Namespace) -> str:
    if args.text is not None:
        if args.row is not None:
            raise InterpscopeError("--row goes with --file, not with --text.")
        return args.text
    from interpscope.uploads import parse_examples

    path = Path(args.file)
    data = read_input_bytes(args.file)
    suffix = path.suffix.lower()
    if args.row is None and suffix in (".txt", ".md", ".text", ""):
        from interpscope.inputs import decode_bytes

        return decode_bytes(data, name=path.name)
    examples = parse_examples(data, path.name)
    row = 0 if args.row is None else args.row
    if not 0 <= row < len(examples):
        raise InterpscopeError(f"--row {row} is out of range: {path.name} has {len(examples)} examples "
                               f"(0-{len(examples) - 1}).")
    return examples[row]


def run_explain(args: argparse.Namespace) -> int:
    from interpscope.cli import relevance_checks, relevance_faithfulness
    from interpscope.inputs import check_text
    from interpscope.relevance.api import explain

    if args.image is not None:
        from interpscope.cli.relevance_image import run as run_image

        return run_image(args)
    from interpscope.cli.relevance_image import refuse_image_flags

    refuse_image_flags(args)
    if args.decoder_text is not None and (args.all_rows or args.out or relevance_faithfulness.wants_faithfulness(args)):
        raise InterpscopeError("--decoder-text explains one source text of an encoder-decoder; it does not go with "
                               "--all-rows or --faithfulness.")
    if relevance_checks.wanted(args):
        return relevance_checks.run(args, lambda: check_text(_text_from_args(args)), load_from_args, _default_method,
                                  read_input_bytes)
    if relevance_faithfulness.wants_faithfulness(args):
        text = None if args.set else check_text(_text_from_args(args))
        return relevance_faithfulness.run(args, text, _options(args), load_from_args, _default_method)
    if args.all_rows or args.out:
        return run_all_rows(args)
    text = check_text(_text_from_args(args))
    if args.png and Path(args.png).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InterpscopeError("--png must end in .png, .svg or .pdf.")
    check_outputs(args)
    lm = load_from_args(args)
    if lm.is_encoder_decoder or args.decoder_text is not None:  # refused there for a decoder-only model
        from interpscope.cli.relevance_seq2seq import run as run_seq2seq

        return run_seq2seq(args, lm, text)
    if args.method is None:
        args.method = _default_method(lm)
    from interpscope.relevance.methods import memory_view

    view = memory_view(args.method)
    if view is not None:
        check_run_memory(lm, view, text)
    result = explain(lm, text, args.method, token=args.target_token,
                     contrast=tuple(args.contrast) if args.contrast else None, options=_options(args),
                     prepend_bos=args.prepend_bos)
    if args.png:  # the token heatmap (matplotlib: no browser needed), in the format its suffix names
        from interpscope.relevance.render import save_heatmap

        save_heatmap(args.png, result.tokens, result.relevance,
                     f"{result.method_label} relevance for {result.target.label} ({lm.name})", result.sink_positions,
                     result.sink_reasons())
    write_outputs(args, result, skip=("png",))  # the page's JSON/CSV exports and its plotly figure (--svg, --html)
    if not json_to_stdout(args):
        _print_human(result)
    return 0


def _print_human(result) -> None:
    target = result.target
    print(f"{result.method_label} on {result.model}: target {target.label} (id {target.token_id}) after position "
          f"{target.position}, {target.kind} {result.logit:.4f}, {result.seconds:.3f} s")
    reasons = result.sink_reasons()
    for index, (token, value) in enumerate(zip(result.tokens, result.relevance, strict=True)):
        print(f"{value:+10.4f}  {token!r}" + (f"  (excluded: {reasons[index]})" if index in reasons else ""))
    if result.conservation is not None:
        c = result.conservation
        softmax = "" if c.softmax_sum is None else f" + softmax {c.softmax_sum:.4f}"  # None: no attention (Mamba)
        biases = "" if c.bias_sum is None else f" + biases {c.bias_sum:.4f}"  # None: the model has none
        print(f"conservation: inputs {c.input_sum:.4f}{biases}{softmax} "
              f"vs {c.target_logit:.4f} (relative error {c.relative_error:.2e})")


ALL_ROWS_FILES = ("aggregates.json", "relevance.csv", "by_token.png", "by_distance.png")  # besides spec and rows


def run_all_rows(args: argparse.Namespace) -> int:
    """--file F --all-rows --out DIR: every row explained (resumable), then aggregates, a tidy CSV and figures."""
    import sys

    from tqdm import tqdm

    from interpscope.relevance.file_attribution import explain_file
    from interpscope.relevance.render import save_bars
    from interpscope.results import to_json
    from interpscope.uploads import parse_table

    if not args.file or not args.all_rows or not args.out:
        raise InterpscopeError("A whole file needs all three of --file F --all-rows --out DIR.")
    if args.contrast or args.row is not None or asked_outputs(args):
        raise InterpscopeError("--all-rows explains each row's next token (or --target-token); it takes no "
                               "--contrast, --row, --json, --csv, --png, --svg or --html (everything goes to --out).")
    path = Path(args.file)
    data = read_input_bytes(args.file)
    check_out_folder(args.out, "--out", force=args.force)
    from interpscope.outputs import refuse_foreign_files
    from interpscope.relevance.file_attribution import ROWS_FILE, SPEC_FILE

    # a person's own rows.jsonl there would be read as finished rows (and appended to), their other files replaced
    refuse_foreign_files(args.out, (SPEC_FILE, ROWS_FILE) + ALL_ROWS_FILES)
    table = parse_table(data, path.name, text_column=args.text_column, label_column=args.label_column)
    options = _options(args)
    lm = load_from_args(args)
    method = args.method or _default_method(lm)
    bars: list = []

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, initial=done - 1, desc="rows", unit="row", file=sys.stderr))
        bars[0].update(done - bars[0].n)

    run = explain_file(lm, table, data, method, options=options, token=args.target_token, folder=args.out,
                       force=args.force, progress=progress)
    for bar in bars:
        bar.close()
    out = Path(run.folder)
    aggregates = run.aggregates()
    from interpscope.atomic import write_text, write_with
    from interpscope.outputs import OutputFolder

    # listed before they are written, so a kill between a write and its record leaves no file of ours unlisted
    OutputFolder.claim(out, force=True, command="explain --all-rows").record(*ALL_ROWS_FILES)
    write_text(out / "aggregates.json", to_json(aggregates) + "\n")
    import pandas as pd

    write_with(out / "relevance.csv", lambda handle: pd.DataFrame(run.tidy()).to_csv(handle, index=False))
    save_bars(out / "by_token.png", [r["token"] for r in aggregates.by_token[:25]],
              [r["mean_relevance"] for r in aggregates.by_token[:25]],
              f"Mean relevance per token type ({method}, {len(run.rows)} rows)")
    save_bars(out / "by_distance.png", [str(r["distance"]) for r in aggregates.by_distance],
              [r["mean_relevance"] for r in aggregates.by_distance],
              "Mean relevance by distance from the predicted position (0 = last token)")
    if table.note:
        print(f"{path.name}: {table.note}", file=sys.stderr)
    print(f"{len(run.rows)} of {run.spec.n_rows} rows explained ({len(run.errors)} could not be: see rows.jsonl), "
          f"{run.seconds:.1f} s this run; {out}/aggregates.json, relevance.csv, by_token.png, by_distance.png")
    return 0


def _default_method(lm: LoadedModel) -> str:
    from interpscope.relevance.methods import methods_for

    return methods_for(lm.adapter)[0].name

