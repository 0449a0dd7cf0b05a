"""`interpscope models` and `interpscope predict`."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import positive_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_outputs,
    check_run_memory,
    json_to_stdout,
    load_from_args,
    read_text_file,
    write_outputs,
)
from interpscope.config import InterpscopeError


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="list bundled and locally cached models")
    from interpscope.models.loading import ModelList

    add_outputs(models, ModelList)
    models.set_defaults(func=run_models)
    actions = models.add_subparsers(dest="models_action", metavar="{estimate}")
    estimate = actions.add_parser(
        "estimate", help="memory of a model and of each view's run, before loading it",
        description="Estimate, from the model's config and safetensors headers (nothing is loaded), the memory of "
                    "its weights and of one run of each view (activations, gradients) at --tokens in --dtype, beside "
                    "the free memory of --device (interpscope.models.memory).")
    add_model_args(estimate)
    estimate.add_argument("--tokens", type=positive_int, default=64, help="prompt length in tokens (default 64)")
    from interpscope.models.memory import VIEWS, MemoryEstimate

    estimate.add_argument("--views", nargs="+", choices=VIEWS, default=list(VIEWS), metavar="VIEW",
                          help=f"views to estimate (default all: {', '.join(VIEWS)})")
    add_outputs(estimate, MemoryEstimate)
    estimate.set_defaults(func=run_estimate)

    predict = subparsers.add_parser("predict", help="top next-token probabilities after a text")
    add_model_args(predict)
    source = predict.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text")
    source.add_argument("--file", help="a UTF-8 text file")
    predict.add_argument("--top", type=positive_int, default=10, help="how many tokens (default 10)")
    predict.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                         help="put the model's prefix token before the text, as every view does by default "
                              "(--no-prepend-bos: the text alone; the document says which in bos_prepended)")
    from interpscope.predict import Prediction

    add_outputs(predict, Prediction)
    predict.set_defaults(func=run_predict)


def run_models(args: argparse.Namespace) -> int:
    from interpscope.models.loading import model_list

    check_outputs(args)
    listing = model_list()
    write_outputs(args, listing)
    if not json_to_stdout(args):
        for m in listing.models:
            print(f"{m.name:<40} {m.family:<10} {m.modality:<6} {m.source}")
    return 0


def run_estimate(args: argparse.Namespace) -> int:
    from interpscope.models.memory import SAFETY, estimate_model

    check_outputs(args)
    result = estimate_model(args.model, args.tokens, dtype=args.dtype, device=args.device, views=args.views)
    write_outputs(args, result)
    if not json_to_stdout(args):
        free = "unknown" if result.free_bytes is None else f"{result.free_bytes / 2**30:,.2f} GiB"
        print(f"{result.model}: {result.parameters:,} parameters, {result.tokens} tokens, {result.dtype}; "
              f"free: {free} (a run may take {SAFETY:.0%})")
        print(f"{'view':<10} {'weights':>10} {'activations':>12} {'gradients':>10} {'total':>10}  fits  (MiB)")
        for row in result.tidy():
            fits = {True: "yes", False: "NO", None: "?"}[row["fits"]]
            print(f"{row['view']:<10} {row['weights_mib']:>10,.1f} {row['activations_mib']:>12,.1f} "
                  f"{row['gradients_mib']:>10,.1f} {row['total_mib']:>10,.1f}  {fits}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from interpscope.predict import predict_next

    if args.top < 1:
        raise InterpscopeError("--top must be at least 1.")
    from interpscope.inputs import check_text

    text = check_text(read_text_file(args.file) if args.file else args.text)
    check_outputs(args)
    lm = load_from_args(args)
    check_run_memory(lm, "predict", text)
    result = predict_next(lm, text, top=args.top, prepend_bos=args.prepend_bos)
    write_outputs(args, result)  # the Prediction's document, as the Home page's export and the API give it
    if not json_to_stdout(args):
        print("tokens:", " | ".join(result.tokens))
        for p in result.predictions:
            print(f"{p.prob:8.4f}  {p.token!r}")
    return 0
