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
