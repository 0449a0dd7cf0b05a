"""One output convention for every command (interpscope.cli.common.add_outputs): `--json [FILE]` (no value or '-':
stdout), `--csv FILE` where the command's result has a tidy table, `--png/--svg/--html FILE` where it has a figure.

The walk holds every subcommand's parser to it (and `entropy-neurons`, which is a command and a group at once); the
runs check on a tiny GPT-2 that the options do what they say: a bare --json prints the document, --json FILE writes
the same one, --csv writes the tidy table under the document's names, --html is one self-contained page and --png a
PNG image (one kaleido export: it drives Chromium and is slow)."""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from interpscope.cli import build_parser, main
from interpscope.cli.common import OUTPUT_SPEC_ATTRIBUTE
from interpscope.results import Result, without_timings
from tests.sae_store_tiny import save_tiny_lm

FIGURE_OPTIONS = ("--png", "--svg", "--html")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every parser that runs a command (a `func` default): each leaf, and a group that is also a
    command. Aliases name the same parser object and are walked once."""
    if path and parser.get_default("func") is not None:
        yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from commands(sub, (*path, name))


COMMANDS = dict(commands(build_parser()))


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def has_table(cls: type) -> bool:
    return callable(getattr(cls, "tidy", None))


def has_figure(cls: type) -> bool:
    return cls.figure is not Result.figure


def test_the_walk_finds_every_command():
    names = {" ".join(path) for path in COMMANDS}
    assert len(names) >= 27, names
    assert {"models", "predict", "relevance", "sae train", "sae store", "sae search", "entropy-neurons",
            "entropy-neurons ablate", "entropy-neurons store", "fourier store", "fourier table", "graphs"} <= names


@pytest.mark.parametrize("path", list(COMMANDS), ids=[" ".join(path) for path in COMMANDS])
def test_every_command_follows_the_output_convention(path):
    parser = COMMANDS[path]
    spec = getattr(parser, OUTPUT_SPEC_ATTRIBUTE, None)
    assert spec is not None, f"{' '.join(path)} does not declare its outputs (interpscope.cli.common.add_outputs)"
    given = options(parser)
    json_option = given.get("--json")
    assert json_option is not None, f"{' '.join(path)} has no --json"
    assert json_option.nargs == "?" and json_option.const == "-" and json_option.default is None, \
        f"{' '.join(path)}: --json must take an optional FILE (bare or '-': stdout)"
    assert spec.results and all(issubclass(cls, Result) and cls.SCHEMA.startswith("interpscope.")
                                for cls in spec.results), spec
    table = all(has_table(cls) for cls in spec.results)
    figure = all(has_figure(cls) for cls in spec.results)
    assert ("--csv" in given) == table, f"{' '.join(path)}: --csv {'missing' if table else 'without a table'}"
    for option in FIGURE_OPTIONS:
        assert (option in given) == figure, f"{' '.join(path)}: {option} {'missing' if figure else 'without a figure'}"
    for option in ("--csv", *FIGURE_OPTIONS):
        if option in given:
            assert given[option].nargs is None and given[option].const is None, f"{' '.join(path)}: {option} FILE"


def test_store_and_train_commands_print_their_summary_by_default():
    for path in (("sae", "train"), ("sae", "store"), ("entropy-neurons", "store"), ("fourier", "store"),
                 ("sae", "sweep"), ("sae", "search")):
        assert getattr(COMMANDS[path], OUTPUT_SPEC_ATTRIBUTE).document_by_default, path


def test_old_forms_still_parse():
    parser = build_parser()
    assert parser.parse_args(["predict", "--text", "hi", "--json"]).json == "-"
    assert parser.parse_args(["predict", "--json", "--text", "hi"]).json == "-"
    assert parser.parse_args(["flow", "--text", "hi", "--json", "out.json"]).json == "out.json"
    assert parser.parse_args(["flow", "--text", "hi", "--json", "-"]).json == "-"
    evaluate = parser.parse_args(["sae", "eval", "--sae", "x", "--json", "--out", "e.json"])
    assert (evaluate.json, evaluate.out) == ("-", "e.json")
    assert parser.parse_args(["sae", "pareto", "--sweep", "s"]).json is None  # printed by default, as before
    neurons = parser.parse_args(["neurons", "ablate", "--neurons", "1.2", "--json"])
    assert neurons.json == "-" and neurons.neurons_action == "ablate"


# --- real runs on a tiny GPT-2 -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def run(capsys, *argv) -> tuple[str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def keys(document) -> set[str]:
    """Every key anywhere in a JSON document."""
    if isinstance(document, dict):
        return set(document) | {k for value in document.values() for k in keys(value)}
    if isinstance(document, list):
        return {k for value in document for k in keys(value)}
    return set()


def check_outputs(capsys, tmp_path: Path, path: tuple[str, ...], argv: list, figure: bool = True,
                  derived: frozenset[str] = frozenset()) -> dict:
    """A bare --json prints the document; --json FILE writes the same one (and the text view stays on stdout);
    --csv writes the tidy table under the document's names (`derived`: columns the table adds, e.g. a rank that is
    a list's order in the document); --html is a page that opens offline."""
    out, _ = run(capsys, *argv, "--json")
    document = json.loads(out)
    spec = getattr(COMMANDS[path], OUTPUT_SPEC_ATTRIBUTE)
    assert document["schema"] in {cls.SCHEMA for cls in spec.results}, (document["schema"], spec)
    assert isinstance(document["schema_version"], int)
    files = {"json": tmp_path / "r.json", "csv": tmp_path / "r.csv", "html": tmp_path / "r.html"}
    extra = ["--json", files["json"], "--csv", files["csv"]] + (["--html", files["html"]] if figure else [])
    out, _ = run(capsys, *argv, *extra)
    assert out.strip() and not out.lstrip().startswith("{")  # the text view, not the document
    written = json.loads(files["json"].read_text(encoding="utf-8"))
    assert without_timings(written, spec.results[0].TIMING_KEYS) == without_timings(document,
                                                                                    spec.results[0].TIMING_KEYS)
    with open(files["csv"], newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    present = {name for name in rows[0] if any(row[name] != "" for row in rows)}  # a None value is absent there
    assert rows and present and present - derived <= keys(document), present - derived - keys(document)
    if figure:
        page = files["html"].read_text(encoding="utf-8")
        assert "<html>" in page[:200] and "* plotly.js v" in page  # a whole page with plotly.js itself inside
        assert len(page) > 1_000_000 and "<script src=" not in page  # nothing fetched: it opens offline
    return document


def test_predict_outputs_and_one_png(model_dir, tmp_path, capsys):
    argv = ["predict", "--model", model_dir, "--text", "It is a truth universally", "--top", "5"]
    document = check_outputs(capsys, tmp_path, ("predict",), argv, derived=frozenset({"rank"}))
    from interpscope.predict import Prediction

    assert document["schema"] == Prediction.SCHEMA and len(document["predictions"]) == 5
    image = tmp_path / "p.png"
    out, _ = run(capsys, *argv, "--png", image, "--json", "-")
    assert json.loads(out)["schema"] == document["schema"]  # --json - still prints the document alone
    assert image.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_heads_outputs(model_dir, tmp_path, capsys):
    check_outputs(capsys, tmp_path, ("heads",), ["heads", "--model", model_dir, "--text", "one two one two"])


def test_neurons_outputs_old_bare_json_included(model_dir, tmp_path, capsys):
    document = check_outputs(capsys, tmp_path, ("entropy-neurons",),
                             ["neurons", "--model", model_dir, "--no-unigram", "--top", "5"])
    from interpscope.entropy_neurons.weights import NeuronStats

    assert document["schema"] == NeuronStats.SCHEMA


def test_models_has_a_table_and_a_figure(tmp_path, capsys):
    """The model list's figure is its table drawn by plotly (issue 45.21: ModelList.figure() raised, though every
    result was documented to have one), so `models` takes --html/--png/--svg like every command with a figure."""
    check_outputs(capsys, tmp_path, ("models",), ["models"], figure=True)


def test_outputs_are_checked_before_any_work(model_dir, tmp_path, capsys):
    for option in ("--csv", "--html", "--png", "--svg", "--json"):
        capsys.readouterr()
        code = main(["predict", "--model", "no-such-model-xyz", "--text", "hi", option, str(tmp_path / "no" / "x")])
        err = capsys.readouterr().err
        assert code == 2 and option in err and "does not exist" in err, err  # not the model's error: first
    assert main(["predict", "--model", str(model_dir), "--text", "hi", "--csv", "-"]) == 2
    assert "--csv writes a file" in capsys.readouterr().err
    same = str(tmp_path / "same")
    assert main(["predict", "--model", str(model_dir), "--text", "hi", "--csv", same, "--html", same]) == 2
    assert "same file" in capsys.readouterr().err


def test_search_keeps_a_query_that_follows_a_bare_json(tmp_path, capsys):
    """`sae search ... --json QUERY`: --json's optional FILE takes the query; with no other query given, it is the
    query and the document goes to stdout. The document is printed without --json too, as before."""
    from interpscope.sae.store.documents import FeatureSearch

    missing = tmp_path / "no-store"
    parsed = build_parser().parse_args(["sae", "search", "--store", str(missing), "--json", "dog"])
    assert (parsed.query, parsed.json) == (None, "dog")
    capsys.readouterr()
    assert main(["sae", "search", "--store", str(missing), "--json", "dog"]) == 2  # the store is read: query taken
    err = capsys.readouterr().err
    assert "not a complete feature store" in err and "QUERY" not in err, err
    assert main(["sae", "search", "--store", str(missing), "--json"]) == 2
    assert "needs a QUERY" in capsys.readouterr().err
    assert FeatureSearch.SCHEMA == "interpscope.sae.search"
