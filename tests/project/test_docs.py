"""The documentation site cannot drift from the code: every command example marked runnable parses with the real
parser, the generated CLI reference names every command and subcommand, and the generated schema reference lists every
result schema the package defines. Fast: nothing runs a model, and `mkdocs build --strict` (scripts/run-tests.sh) is
not needed, since the references come from the same functions docs/hooks.py calls during the build."""
from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from interpscope.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,}|~{3,})(?P<info>.*)$")
SCHEMA = re.compile(r"""^\s*SCHEMA(?:\s*:\s*ClassVar\[str\])?\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def hooks():
    """docs/hooks.py, the MkDocs hook module that generates the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runnable_commands(only_runnable: bool = True) -> list[tuple[str, str]]:
    """(where, command line) of every `interpscope ...` line in a fenced block whose info string says runnable
    (```bash {.runnable}), in docs/**/*.md, or with only_runnable=False in every shell block; backslash
    continuations joined."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        fence, runnable, pending = None, False, ""
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = FENCE.match(line)
            if fence is None:
                if match:
                    info = match.group("info")
                    shell = info.strip().startswith(("bash", "sh", "console", "shell"))
                    fence, runnable = match.group("ticks"), "runnable" in info or (shell and not only_runnable)
                continue
            if match and match.group("ticks").startswith(fence) and not match.group("info").strip():
                fence, runnable, pending = None, False, ""
                continue
            if not runnable:
                continue
            text = pending + line.strip()
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            if text.startswith("interpscope "):
                found.append((f"{path.relative_to(ROOT)}:{number}", text))
    return found


def parser_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], list[str]]:
    """Every command path of the parser (nested groups included) -> its aliases."""
    paths: dict[tuple[str, ...], list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names: dict[int, list[str]] = {}
            for name, sub in action.choices.items():
                names.setdefault(id(sub), []).append(name)
            for first, *aliases in names.values():
                sub = action.choices[first]
                paths[(*prefix, first)] = aliases
                paths.update(parser_commands(sub, (*prefix, first)))
    return paths


COMMANDS = runnable_commands()  # run by the suite: quick, on the bundled model
EXAMPLES = runnable_commands(only_runnable=False)  # every example: parsed, so none names a gone option


def test_docs_mark_a_handful_of_runnable_examples():
    assert len(COMMANDS) >= 10, COMMANDS
    assert len({where.split(":")[0] for where, _ in COMMANDS}) >= 5  # spread over several pages


@pytest.mark.parametrize(("where", "command"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_example_parses(where, command):
    argv = shlex.split(command, comments=True)
    assert argv[0] == "interpscope"
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as exit_:
        pytest.fail(f"{where}: `{command}` does not parse (exit {exit_.code})")


def test_cli_reference_names_every_command_and_alias():
    text = hooks().cli_reference()
    headings = set(re.findall(r"^#{2,4} interpscope (.+)$", text, re.MULTILINE))
    commands = parser_commands(build_parser())
    assert len(commands) >= 25  # the top-level commands and the sae / entropy-neurons / fourier groups
    for path, aliases in commands.items():
        assert " ".join(path) in headings, f"the CLI reference has no section for `interpscope {' '.join(path)}`"
        for alias in aliases:
            assert f"`interpscope {' '.join((*path[:-1], alias))}`" in text, f"alias {alias} of {path} not named"
    assert headings == {" ".join(path) for path in commands}  # and nothing that is not a command


def test_cli_reference_lists_every_option_of_every_command():
    text = hooks().cli_reference()
    parser = build_parser()
    for path in parser_commands(parser):
        sub = parser
        for name in path:
            sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        after = text.split(f" interpscope {' '.join(path)}\n", 1)[1]
        section = re.split(r"^#", after, maxsplit=1, flags=re.MULTILINE)[0]  # up to the next command's heading
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section or f", {option}" in section, f"{path}: {option} missing"


def test_schema_reference_lists_every_schema_the_package_defines():
    defined = set()
    for path in (ROOT / "backend" / "interpscope").rglob("*.py"):
        defined |= {name for name in SCHEMA.findall(path.read_text(encoding="utf-8")) if name}
    assert len(defined) >= 40 and "interpscope.relevance" in defined
    text = hooks().schema_reference()
    listed = set(re.findall(r"^## (\S+)$", text, re.MULTILINE))
    assert defined == listed, f"missing: {sorted(defined - listed)}; not in the package: {sorted(listed - defined)}"


def test_generated_placeholders_are_all_known():
    module = hooks()
    for path in DOCS.rglob("*.md"):
        for name in module.PLACEHOLDER.findall(path.read_text(encoding="utf-8")):
            assert name in module.GENERATORS, f"{path}: unknown generated block {name}"


# --- the runnable examples run (issue 44.7): on the bundled model, from the repository root as the docs say, with
# every file they write sent into a scratch folder --------------------------------------------------------------------
OUTPUT_FLAGS = {"--json", "--check-json", "--png", "--svg", "--html", "--csv", "--out"}


def _runnable_argv(command: str, scratch: Path) -> list[str]:
    """The example's arguments (without `interpscope` and a trailing comment), its output files moved into scratch."""
    argv = shlex.split(command, comments=True)[1:]
    for i, word in enumerate(argv):
        if i and argv[i - 1] in OUTPUT_FLAGS and word != "-" and not word.startswith("--"):
            argv[i] = str(scratch / Path(word).name)
    return argv


@pytest.mark.bundled
@pytest.mark.parametrize("where, command", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_runnable_example_runs(where, command, tmp_path, monkeypatch, capsys):
    """Each example marked runnable runs to exit 0, so the docs cannot rot: a renamed option, a changed default or a
    removed command fails here."""
    from interpscope.cli import main

    monkeypatch.chdir(ROOT)
    code = main(_runnable_argv(command, tmp_path))
    captured = capsys.readouterr()
    assert code == 0, f"{where}: {command}\n{captured.err[-2000:]}"
