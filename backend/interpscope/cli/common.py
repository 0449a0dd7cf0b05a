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


# the options a command writes to (a file, or a folder for --out); every other option's value that names an existing
# file or folder is something the command reads
OUTPUT_OPTIONS = ("json", "check_json", "csv", "png", "svg", "html", "pdf", "out")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _existing(value: str) -> Path | None:
    try:
        path = Path(value).expanduser()
        return path.resolve() if path.exists() else None
    except (OSError, RuntimeError, ValueError):
        return None


def refuse_outputs_over_inputs(args: argparse.Namespace) -> None:
    """Before any work: refuse an output that is one of the command's inputs (resolved, symlinks followed), an
    existing file inside an input folder (an SAE's cfg.json, a set's manifest, a sweep's table), or another output
    of the same command; writing it would destroy what the command reads."""
    values = vars(args)
    outputs = [(dest, str(values[dest])) for dest in OUTPUT_OPTIONS
               if isinstance(values.get(dest), str) and values[dest] not in ("", "-")]
    inputs: list[tuple[str, Path]] = []
    for dest, value in values.items():
        if dest in OUTPUT_OPTIONS or dest in ("func", "command") or callable(value):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.strip() and (found := _existing(item.strip())) is not None:
                inputs.append((dest, found))
    seen: dict[Path, str] = {}
    for dest, value in outputs:
        try:
            target = Path(value).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            continue  # the output's own check says why it cannot be written
        if target in seen:
            raise InterpscopeError(f"{_flag(dest)} and {_flag(seen[target])} name the same file ({value}); give each "
                                   "output its own path.")
        seen[target] = dest
        for source, path in inputs:
            inside = path.is_dir() and target != path and target.is_relative_to(path) and target.is_file()
            if target == path or inside:
                what = f"{value} is {'a file inside ' if inside else ''}what {_flag(source)} reads"
                raise InterpscopeError(f"{_flag(dest)} would overwrite its own input: {what}. Write the output "
                                       "somewhere else; nothing was changed.")


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
