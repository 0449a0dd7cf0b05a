"""`interpscope models` and `interpscope predict`."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import positive_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_outputs,
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


def run_predict(args: argparse.Namespace) -> int:
    from interpscope.predict import predict_next

    if args.top < 1:
        raise InterpscopeError("--top must be at least 1.")
    from interpscope.inputs import check_text

    text = check_text(read_text_file(args.file) if args.file else args.text)
    check_outputs(args)
    lm = load_from_args(args)
    result = predict_next(lm, text, top=args.top, prepend_bos=args.prepend_bos)
    write_outputs(args, result)  # the Prediction's document, as the Home page's export and the API give it
    if not json_to_stdout(args):
        print("tokens:", " | ".join(result.tokens))
        for p in result.predictions:
            print(f"{p.prob:8.4f}  {p.token!r}")
    return 0
