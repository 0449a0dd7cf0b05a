"""Shared command-line helpers: model options, text input options, JSON output."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.config import InterpscopeError
from backend.inputs import decode_bytes
from backend.models.registry import DEFAULT_MODEL
from backend.results import to_json


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"bundled name, local folder or Hugging Face id (default {DEFAULT_MODEL})")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps (default auto)")
    parser.add_argument("--dtype", default="float32", help="float32, float16, bfloat16, float64 or auto")


def load_from_args(args: argparse.Namespace):
    from backend.models.loading import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def load_model_for_sae(args: argparse.Namespace, sae, load=load_from_args):
    """--model, or else the model the SAE's cfg.json names (a Hugging Face id of a bundled model reads as that
    bundled model); a named model that cannot be loaded gets a message pointing at --model. `load` is the
    command's own loader (load_from_args)."""
    if args.model is not None:
        return load(args)
    args.model = sae.cfg.model_name or DEFAULT_MODEL
    try:
        return load(args)
    except InterpscopeError as err:
        raise InterpscopeError(f"The SAE's cfg.json names the model {args.model!r}, which could not be loaded "
                               f"({err}). Give the model it reads with --model (a bundled name such as "
                               f"{DEFAULT_MODEL}, a local folder or a Hugging Face id).") from None


def read_text_file(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise InterpscopeError(f"No such file: {path}")
    return decode_bytes(file.read_bytes(), name=file.name)


def check_out_file(path: str | None, flag: str) -> None:
    """Fail now, before any computation, when an output file could not be written (None and '-' mean stdout)."""
    if path and path != "-":
        from backend.outputs import check_output_file

        check_output_file(path, flag)


def emit_json(value, out: str | None = None) -> None:
    """Write JSON to a file, or to stdout when out is None or '-'."""
    text = to_json(value)
    if out and out != "-":
        Path(out).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
