"""Shared command-line helpers: model options, text input options, JSON output."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscope.config import InterpscopeError
from interpscope.inputs import decode_bytes
from interpscope.models.registry import DEFAULT_MODEL
from interpscope.results import to_json


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"bundled name, local folder or Hugging Face id (default {DEFAULT_MODEL})")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps (default auto)")
    parser.add_argument("--dtype", default="float32", help="float32, float16, bfloat16, float64 or auto")


def load_from_args(args: argparse.Namespace):
    from interpscope.models.loading import load_model

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


def read_input_bytes(path: str, flag: str = "--file") -> bytes:
    """The bytes of an input file, or one clear error: missing, a folder, not a regular file (a FIFO or device
    would block or never end), over the upload limit, or unreadable (permission denied, I/O error)."""
    from interpscope.inputs import MAX_UPLOAD_BYTES

    file = Path(path).expanduser()
    if file.is_dir():
        raise InterpscopeError(f"{flag} {path} is a folder, not a file.")
    if not file.exists():
        raise InterpscopeError(f"No such file: {path}")
    if not file.is_file():
        raise InterpscopeError(f"{flag} {path} is not a regular file.")
    size = file.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise InterpscopeError(f"{file.name} is {size / 2**20:.1f} MiB; the limit is {MAX_UPLOAD_BYTES / 2**20:.0f} "
                               "MiB.")
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_UPLOAD_BYTES + 1)
    except OSError as err:
        raise InterpscopeError(f"Cannot read {flag} {path}: {err.strerror or err}.") from None
    return data


def read_text_file(path: str, flag: str = "--file") -> str:
    """A text file's contents (UTF-8 or UTF-16 with a BOM), with one-line errors for every bad file."""
    return decode_bytes(read_input_bytes(path, flag), name=Path(path).name)


def check_corpus(source: str | None, flag: str = "--corpus") -> None:
    """Fail now, before any model is loaded or output folder claimed, when a --corpus file or folder cannot be
    read or holds no usable text (the bundled corpus is not re-read)."""
    if source is None or str(source) in ("austen", "bundled"):
        return
    from interpscope.corpus import paragraphs

    try:
        found = paragraphs(source, "all")
    except OSError as err:
        raise InterpscopeError(f"Cannot read {flag} {source}: {err.strerror or err}"
                               f"{f' ({err.filename})' if err.filename else ''}.") from None
    if not found:
        raise InterpscopeError(f"{flag} {source} holds no paragraphs of text.")


def check_out_file(path: str | None, flag: str) -> None:
    """Fail now, before any computation, when an output file could not be written (None and '-' mean stdout)."""
    if path and path != "-":
        from interpscope.outputs import check_output_file

        check_output_file(path, flag)


def check_out_folder(path: str | None, flag: str = "--out", force: bool = False) -> None:
    """Fail now, before any computation, when an output folder could not be written (see check_output_folder)."""
    if path:
        from interpscope.outputs import check_output_folder

        check_output_folder(path, force, flag)


def emit_json(value, out: str | None = None) -> None:
    """Write a result's JSON document to a file (atomically: never half a document), or to stdout when out is None
    or '-'. Only a Result: the command's --json is the same document as the page's export and the API's to_dict()."""
    from interpscope.results import Result

    if not isinstance(value, Result):
        raise TypeError(f"emit_json takes a Result (a document with a schema), not {type(value).__name__}")
    text = to_json(value)
    if out and out != "-":
        from interpscope.atomic import write_text

        write_text(out, text + "\n")
    else:
        sys.stdout.write(text + "\n")
