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


def check_run_memory(lm, view: str, text: str | None = None, **options) -> None:
    """Before a view's run: refuse one that would not fit (interpscope.models.memory.check_run); for a model that is
    not bundled (a person's own folder or hub id), print the estimate first on stderr: weights, the run's activations
    and gradients at this length and dtype, and the free memory."""
    from interpscope.limits import free_bytes
    from interpscope.models.memory import check_run

    row = check_run(lm, view, text, **options)
    if lm.source != "bundled":
        gib = 2**30
        print(f"interpscope: memory estimate for {view} on {row.tokens} tokens in {str(lm.dtype).replace('torch.', '')}"
              f": weights {row.weight_bytes / gib:.2f} GiB (loaded), activations {row.activation_bytes / gib:.2f} GiB, "
              f"gradients {row.gradient_bytes / gib:.2f} GiB; {free_bytes(lm.device) / gib:.2f} GiB free "
              f"(every view: interpscope models estimate --model {lm.name})", file=sys.stderr)


def load_model_for_sae(args: argparse.Namespace, sae, load=load_from_args):
    """--model, or else the model the SAE's cfg.json names (a Hugging Face id of a bundled model reads as that
    bundled model); a named model that cannot be loaded gets a message pointing at --model. `load` is the
    command's own loader (load_from_args)."""
    from interpscope.sae.releases import check_sae_model

    if args.model is not None:
        check_sae_model(sae, args.model)  # a released dictionary of another model: refused naming both
        return load(args)
    args.model = sae.cfg.model_name or DEFAULT_MODEL
    try:
        loaded = load(args)
    except InterpscopeError as err:
        raise InterpscopeError(f"The SAE's cfg.json names the model {args.model!r}, which could not be loaded "
                               f"({err}). Give the model it reads with --model (a bundled name such as "
                               f"{DEFAULT_MODEL}, a local folder or a Hugging Face id).") from None
    return loaded


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


# --- the output convention ---------------------------------------------------------------------------------------
# Every command that produces a result takes `--json [FILE]` (no value or '-': stdout), `--csv FILE` where its result
# has a tidy table and `--png/--svg/--html FILE` where it has a figure; tests/cli/test_cli_convention.py walks every
# subcommand's parser and holds each to it through the OutputSpec that add_outputs records on the parser.
FIGURE_FORMATS = ("png", "svg", "html")
OUTPUT_SPEC_ATTRIBUTE = "interpscope_outputs"


def result_has_table(result: type) -> bool:
    """Whether a Result class has a tidy table (its `tidy()`, so `to_frame()` / `to_csv()` work)."""
    return callable(getattr(result, "tidy", None))


def result_has_figure(result: type) -> bool:
    """Whether a Result class has a figure of its own (`figure()` overridden, so it does not raise)."""
    from interpscope.results import Result

    return getattr(result, "figure", Result.figure) is not Result.figure


class OutputSpec:
    """What add_outputs gave a command: the Result classes it can print (one per mode), whether they all have a
    table (--csv) and a figure (--png/--svg/--html), and whether the document goes to stdout without --json."""

    def __init__(self, results: tuple[type, ...], document_by_default: bool) -> None:
        self.results = results
        self.table = all(result_has_table(cls) for cls in results)
        self.figure = all(result_has_figure(cls) for cls in results)
        self.document_by_default = document_by_default

    @property
    def options(self) -> tuple[str, ...]:
        return ("--json",) + (("--csv",) if self.table else ()) + \
            (tuple(f"--{fmt}" for fmt in FIGURE_FORMATS) if self.figure else ())

    def __repr__(self) -> str:
        return f"OutputSpec({', '.join(cls.__name__ for cls in self.results)}: {' '.join(self.options)})"


def add_outputs(parser: argparse.ArgumentParser, *results: type, document_by_default: bool = False,
                json_help: str | None = None, figure_help: dict[str, str] | None = None) -> OutputSpec:
    """Add the output options of a command whose result is one of `results` (Result classes, one per mode of the
    command): `--json [FILE]`, `--csv FILE` when every one has a tidy table, `--png/--svg/--html FILE` when every one
    has a figure. `document_by_default`: the command prints its document even without --json (store, train,
    search); --json FILE then sends it to FILE instead. The spec is recorded on the parser (OUTPUT_SPEC_ATTRIBUTE)."""
    if not results:
        raise TypeError("add_outputs needs the command's Result class(es)")
    spec = OutputSpec(tuple(results), document_by_default)
    group = parser.add_argument_group("outputs")
    default_note = " (the default)" if document_by_default else ""
    group.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                       help=json_help or f"write the result's JSON document to FILE; without FILE or with '-' print it "
                                         f"to stdout{default_note}")
    if spec.table:
        group.add_argument("--csv", metavar="FILE", help="write the result's tidy table as CSV to FILE")
    if spec.figure:
        helps = {"png": "write the result's figure as a PNG image to FILE",
                 "svg": "write the result's figure as an SVG image to FILE",
                 "html": "write the result's figure as an interactive HTML page to FILE (plotly.js inside: it "
                         "opens offline)"} | (figure_help or {})
        for fmt in FIGURE_FORMATS:
            group.add_argument(f"--{fmt}", metavar="FILE", help=helps[fmt])
    setattr(parser, OUTPUT_SPEC_ATTRIBUTE, spec)
    return spec


def asked_outputs(args: argparse.Namespace, names: tuple[str, ...] = ("json", "csv", *FIGURE_FORMATS)) -> list[str]:
    """The output flags given on this command line (as --name)."""
    return [f"--{name}" for name in names if getattr(args, name, None) is not None]


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every output file asked for can be written (--json also '-': stdout; the others take a
    file name)."""
    for name in ("json", "csv", *FIGURE_FORMATS):
        value = getattr(args, name, None)
        if value is None:
            continue
        if name != "json" and value in ("", "-"):
            raise InterpscopeError(f"--{name} writes a file: give it a file name (only --json prints to stdout).")
        check_out_file(value, f"--{name}")


def check_json_out(args: argparse.Namespace) -> None:
    """The `--out FILE` of `sae eval/feature/steer/prompt`: the older way to write --json to a file (`--json --out
    FILE` is `--json FILE`); it needs --json and goes with a bare one."""
    check_out_file(args.out, "--out")
    if args.out and args.json not in (None, "-"):
        raise InterpscopeError("--out and --json FILE both say where the JSON goes: give one of them.")
    if args.out and not args.json:
        raise InterpscopeError("--out writes the JSON: give --json with it.")


def json_to_stdout(args: argparse.Namespace, document_by_default: bool = False) -> bool:
    """Whether stdout carries the JSON document (and nothing else): --json without a file or '-', or no --json at
    all for a command that prints its document by default."""
    value = getattr(args, "json", None)
    return value == "-" or (value is None and document_by_default)


def write_outputs(args: argparse.Namespace, result, *, document_by_default: bool = False,
                  skip: tuple[str, ...] = ()) -> None:
    """Write every output asked for: the JSON document (emit_json: a file, or stdout), the tidy table as CSV and the
    figure as PNG/SVG (plotly's static export through kaleido) or a self-contained HTML page. `skip`: outputs the
    command wrote itself (explain's --png heatmap)."""
    target = getattr(args, "json", None)
    for name in ("csv", *FIGURE_FORMATS):
        path = getattr(args, name, None)
        if path is None or name in skip:
            continue
        if name == "csv":
            try:
                result.to_csv(path)
            except NotImplementedError:
                raise InterpscopeError(f"--csv: this result ({result.SCHEMA}) has no table; use --json.") from None
        else:
            try:
                figure = result.figure()
            except NotImplementedError:
                raise InterpscopeError(f"--{name}: this result ({result.SCHEMA}) has no figure; use --json.") \
                    from None
            write_figure(figure, path, name)
    if "json" not in skip and (target is not None or document_by_default):
        emit_json(result, target)


def write_figure(figure, path: str | Path, fmt: str, scale: float = 2.0) -> Path:
    """Write a plotly figure to `path` (atomically): png/svg through kaleido (it drives Chromium), html as one
    self-contained page (plotly.js embedded, so it opens offline)."""
    import plotly.io as pio

    from interpscope import atomic

    if fmt == "html":
        return atomic.write_text(path, pio.to_html(figure, include_plotlyjs=True, full_html=True))
    if fmt not in ("png", "svg", "pdf"):
        raise ValueError(f"unknown figure format {fmt!r}")
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = pio.to_image(figure, format=fmt, scale=scale if fmt == "png" else 1.0,
                                width=figure.layout.width or 1000, height=figure.layout.height or 550)
    except (ImportError, RuntimeError, ValueError, OSError) as err:
        raise InterpscopeError(f"--{fmt}: the static image export (plotly + kaleido, which drives Chromium) failed: "
                               f"{str(err).splitlines()[0][:200] if str(err) else type(err).__name__}. --html "
                               "writes the figure without a browser.") from None
    return atomic.write_bytes(path, data)


# --- SAE folders --------------------------------------------------------------------------------------------------
def sae_folder(value: str) -> str:
    """An `--sae` value (argparse type of every option naming an SAE folder): a released dictionary RELEASE/SAE_ID
    (interpscope.sae.releases: resolved through the Hugging Face cache), a folder in a released format (read into an
    SAE folder once), an SAE folder as given, or a run folder holding exactly one SAE folder (e.g. `sae train --out
    DIR` writes DIR/<arch>-<width>-...): that one, said on stderr. A folder holding several SAEs, or none, is refused
    naming the SAE folders inside. Anything else (a file, a missing path, a folder with a cfg.json or weights,
    pickles) goes on as given for the SAE loader to judge."""
    from interpscope.sae import releases
    from interpscope.sae.folder import CFG_FILE, PICKLE_SUFFIXES, WEIGHTS_FILE
    from interpscope.sae.formats import detect_format

    try:
        if releases.looks_like_release(value):
            folder = releases.resolve(value)
            print(f"interpscope: {value} is a released dictionary; using {folder}", file=sys.stderr)
            return str(folder)
    except InterpscopeError as err:  # unknown id, not cached offline, unreadable files: argparse's one line, exit 2
        raise argparse.ArgumentTypeError(" ".join(str(err).split())) from None
    path = Path(value).expanduser()
    try:
        if not path.is_dir() or (path / CFG_FILE).exists() or (path / WEIGHTS_FILE).exists():
            return value
        if detect_format(path) is not None:
            try:
                folder = releases.import_folder(path)
            except InterpscopeError as err:
                raise argparse.ArgumentTypeError(" ".join(str(err).split())) from None
            print(f"interpscope: {value} is a released dictionary's folder; read into {folder}", file=sys.stderr)
            return str(folder)
        entries = sorted(path.iterdir())
        if any(entry.suffix.lower() in PICKLE_SUFFIXES for entry in entries):
            return value  # the loader names (and refuses) the pickle
        inside = [entry for entry in entries if entry.is_dir() and (entry / CFG_FILE).is_file()]
    except OSError:
        return value
    if len(inside) == 1:
        print(f"interpscope: {value} is a run folder holding one SAE; using {inside[0]}", file=sys.stderr)
        return str(inside[0])
    if not inside:
        raise argparse.ArgumentTypeError(f"{value} is not an SAE folder (no {CFG_FILE}) and holds no SAE folder "
                                         f"(a folder with {CFG_FILE} and {WEIGHTS_FILE}).")
    names = ", ".join(entry.name for entry in inside)
    raise argparse.ArgumentTypeError(f"{value} is not an SAE folder (no {CFG_FILE}); it holds {len(inside)} SAE "
                                     f"folders: {names}. Give one of them, e.g. {inside[0]}.")
