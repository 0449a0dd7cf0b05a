"""`interpscope fourier spectrum|filter|table`: Fourier features of numbers from the command line."""
from __future__ import annotations

import argparse
import importlib

from interpscope.cli.argtypes import int_between, positive_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_outputs,
    json_to_stdout,
    load_from_args,
    write_outputs,
)
from interpscope.cli.scale_args import add_batch_arg, add_scale_args, scale_from_args
from interpscope.config import InterpscopeError

FOURIER_SUBCOMMAND_MODULES = ["interpscope.cli.fourier_store_cmd"]


def register(subparsers: argparse._SubParsersAction) -> None:
    fourier = subparsers.add_parser("fourier", help="Fourier features of numbers (spectra, filters)")
    commands = fourier.add_subparsers(dest="fourier_command", required=True)
    for module_name in FOURIER_SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(commands)

    spectrum = commands.add_parser("spectrum", help="Fourier magnitude of the number representations")
    add_model_args(spectrum)
    spectrum.add_argument("--numbers", type=int_between(10, 2000),
                          help="N: analyse the numbers 0..N-1 (default: all single-token numbers up to 520, or 100 for "
                               "digit tokenizers)")
    spectrum.add_argument("--layer", type=int, help="hidden state after this block (-1 = embeddings); default: "
                                                    "token embeddings when numbers are single tokens, else last")
    spectrum.add_argument("--matrix", choices=["embedding", "unembedding"], default="embedding")
    spectrum.add_argument("--all-layers", action="store_true",
                          help="every layer's hidden-state spectrum, its top periods and baseline (the page's view "
                               "for models that split digits)")
    from interpscope.fourier.documents import FilterTableDocument, LayerSpectraDocument, SpectrumDocument

    add_outputs(spectrum, SpectrumDocument, LayerSpectraDocument)
    spectrum.set_defaults(func=run_spectrum)

    for name, help_text in (("filter", "accuracy and loss of addition with one frequency filter"),
                            ("table", "the full filter table (no filter, low/high-pass on attn/mlp/both)")):
        command = commands.add_parser(name, help=help_text)
        add_model_args(command)
        if name == "filter":
            command.add_argument("--kind", choices=["low", "high"], required=True,
                                 help="low: low-pass (removes k >= tau); high: high-pass (removes 1 <= k < tau)")
            command.add_argument("--modules", choices=["attn", "mlp", "both"], required=True)
        command.add_argument("--tau", type=positive_int,
                             help="split frequency (default ceil(N/10): periods <= 10 are high)")
        command.add_argument("--prompts", type=positive_int, default=500, help="how many a+b prompts (default 500)")
        command.add_argument("--numbers", type=int_between(10, 2000),
                             help="N (default: all single-token numbers up to 520)")
        command.add_argument("--split", choices=["train", "valid", "test", "all"], default="test")
        command.add_argument("--positions", choices=["last", "all"], default="last",
                             help="filter at the answer position only (default) or at every token")
        command.add_argument("--template", default="{a}+{b}=", help="prompt template with {a} and {b}")
        command.add_argument("--control-seeds", type=int_between(0, 100), default=5,
                             help="seeds of the same-rank random-subspace control beside each filter (default 5; "
                                  "0 leaves it out)")
        add_batch_arg(command, "--batch-size", 512, "prompts per model call")
        add_scale_args(command)
        add_outputs(command, FilterTableDocument)
        command.set_defaults(func=run_filter)


def run_spectrum(args: argparse.Namespace) -> int:
    from interpscope.fourier.probe import check_numbers, default_numbers
    from interpscope.fourier.spectra import auto_spectrum

    check_outputs(args)
    lm = load_from_args(args)
    n_numbers = check_numbers(args.numbers or default_numbers(lm))
    if args.layer is not None and args.matrix != "embedding":
        raise InterpscopeError("--matrix applies to the token (un)embedding; leave it out with --layer.")
    if args.all_layers:
        if args.layer is not None or args.matrix != "embedding":
            raise InterpscopeError("--all-layers gives every layer: it takes no --layer or --matrix.")
        from interpscope.fourier.spectra import hidden_spectra

        layers = hidden_spectra(lm, n_numbers)
        write_outputs(args, layers)
        if not json_to_stdout(args):
            print(f"{layers.model}: hidden-state spectra over 0..{layers.numbers - 1}, per layer")
            print(layers.baseline_reading())
            for row in layers.table_rows():
                print(f"  {row['layer']:<10} top periods {', '.join(f'{p:.3g}' for p in row['top_periods'])}")
        return 0
    result = auto_spectrum(lm, n_numbers, layer=args.layer, matrix=args.matrix)
    write_outputs(args, result)
    if not json_to_stdout(args):
        print(f"{result.model}: {result.source} spectrum over 0..{result.numbers - 1}")
        print(result.to_dict()["reading"])
        for o in result.outliers:
            print(f"  outlier: period {o.period:8.3f}  (k={o.frequency})  magnitude {o.magnitude:.4g}  "
                  f"score {o.score:.1f}")
    return 0


def run_filter(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.fourier.data import check_template
    from interpscope.fourier.probe import TABLE_CONFIGS, run_filters

    check_template(args.template)  # a bad template is one line before any model loads or progress bar starts
    check_outputs(args)
    scale = scale_from_args(args)
    lm = load_from_args(args)
    from interpscope.scale.memory import resolve_batch_size

    batch_size = resolve_batch_size(args.batch_size, lm, context=16, default=512)
    configs = [("none", "none"), (args.kind, args.modules)] if args.fourier_command == "filter" else TABLE_CONFIGS
    with tqdm(total=100, disable=json_to_stdout(args), desc="filters + controls", unit="%") as bar:
        table = run_filters(lm, configs, tau=args.tau, prompts=args.prompts, numbers=args.numbers, split=args.split,
                            positions=args.positions, template=args.template, control_seeds=args.control_seeds,
                            batch_size=batch_size, scale=scale,
                            progress=lambda fraction, label: bar.update(round(100 * fraction) - bar.n))
    write_outputs(args, table)
    if json_to_stdout(args):
        return 0
    document = table.to_dict()
    for warning in table.warnings:
        print("warning:", warning)
    for row in document["rows"]:
        control = (f"  control {row['control_accuracy_mean']:.2%} +- {row['control_accuracy_sd']:.2%}  specificity "
                   + (f"{row['specificity']:.2f}" if "specificity" in row else "undefined")
                   if "control_accuracy_mean" in row else "")
        print(f"{row['kind']:>5} {row['modules']:>5}  removes {row['removed']:<17} rank {row['rank']:>4}  loss "
              f"{row['loss']:8.4f}  acc {row['accuracy']:.2%}  +-2 {row['within_2']:.2%}  +-10 {row['within_10']:.2%}"
              f"{control}  errors {row['error_counts']}")
    if "reading" in document:
        print(document["reading"])
    return 0
