"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages that are generated from the code, so they cannot drift.

A page holds a placeholder comment and `on_page_markdown` replaces it on every `mkdocs build` / `mkdocs serve`:

- `<!-- generated:cli -->`: every command and subcommand of `interpscope.cli.build_parser()` (nested groups such as
  `sae train` included), with its aliases, help, usage and options;
- `<!-- generated:schemas -->`: every result schema (a `Result` subclass with a `SCHEMA`), its version, its class
  and the top-level keys of its JSON document;
- `<!-- generated:limits -->`: the server-mode ceilings of `interpscope.limits.SERVER_CEILINGS`.

(docs/changelog.md includes CHANGELOG.md from the repository root with pymdownx.snippets.)

tests/project/test_docs.py imports this file and calls the same functions.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import importlib
import inspect
import pkgutil
import re
import textwrap
from typing import Any

# --- Markdown helpers ---------------------------------------------------------------------------------------------

def _escape(text: str) -> str:
    """Plain text (argparse help, docstrings) made safe in Markdown and table cells; `code spans` kept as they are."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span (a table keeps its pipes)
            out.append(part)
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"([\\*_\[\]|])", r"\\\1", part)
        out.append(part)
    return " ".join("".join(out).split())


def _code(text: str) -> str:
    """`text` as an inline code span."""
    tick, pad = ("``", " ") if "`" in text else ("`", "")
    return f"{tick}{pad}{text}{pad}{tick}"  # a table keeps the pipes of a code span


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


# --- CLI reference ------------------------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, list[str], str, argparse.ArgumentParser]]:
    """(name, aliases, help, parser) of each direct subcommand, in the parser's order."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        names: dict[int, list[str]] = {}
        for name, sub in action.choices.items():
            names.setdefault(id(sub), []).append(name)
        seen = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            found.append((name, names[id(sub)][1:], helps.get(name, ""), sub))
    return found


def cli_commands(parser: argparse.ArgumentParser | None = None, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser, depth first: ('relevance',), ('sae',), ('sae', 'train'), ..."""
    if parser is None:
        from interpscope.cli import build_parser

        parser = build_parser()
    paths: list[tuple[str, ...]] = []
    for name, _aliases, _help, sub in _subcommands(parser):
        paths.append((*prefix, name))
        paths.extend(cli_commands(sub, (*prefix, name)))
    return paths


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        if not actions:
            continue
        title = group.title or "options"
        lines += ["", f"*{_escape(title)}*" + (f": {_escape(group.description)}" if group.description else ""), "",
                  "| argument | default | description |", "|---|---|---|"]
        for action in actions:
            invocation = formatter._format_action_invocation(action)
            default = action.default
            shown = ("" if default in (None, False, argparse.SUPPRESS) or isinstance(action, argparse._StoreTrueAction)
                     else _code(repr(default) if isinstance(default, str) else str(default)))
            required = " (required)" if action.required and action.option_strings else ""
            help_text = formatter._expand_help(action) if action.help and action.help != argparse.SUPPRESS else ""
            lines.append(f"| {_code(invocation)}{required} | {shown} | {_escape(help_text)} |")
    return lines


def _command_section(path: tuple[str, ...], aliases: list[str], help_text: str,
                     parser: argparse.ArgumentParser) -> list[str]:
    level = "#" * min(len(path) + 1, 4)
    lines = [f"{level} interpscope {' '.join(path)}", ""]
    if aliases:
        lines += [f"Alias: {', '.join(_code('interpscope ' + ' '.join((*path[:-1], a))) for a in aliases)}.", ""]
    if help_text:
        lines += [_escape(help_text[0].upper() + help_text[1:]) + ("" if help_text.endswith(".") else "."), ""]
    if parser.description:
        lines += [_escape(parser.description), ""]
    first, *rest = parser.format_usage().strip().removeprefix("usage: ").splitlines()
    usage = "\n".join([first] + [line.removeprefix(" " * len("usage: ")) for line in rest])
    lines += ["```text", usage, "```"]
    lines += _options_table(parser)
    lines.append("")
    return lines


def cli_reference() -> str:
    """The CLI reference: one section per command and subcommand, generated from `interpscope.cli.build_parser()`."""
    from interpscope.cli import build_parser

    parser = build_parser()
    lines = ["Commands (the top level of `interpscope --help`):", "",
             "| command | aliases | what it does |", "|---|---|---|"]
    for name, aliases, help_text, _sub in _subcommands(parser):
        anchor = f"interpscope-{name}"
        lines.append(f"| [{_code('interpscope ' + name)}](#{anchor}) | "
                     f"{', '.join(_code(a) for a in aliases)} | {_escape(help_text)} |")
    lines.append("")

    def walk(sub_parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> None:
        for name, aliases, help_text, sub in _subcommands(sub_parser):
            lines.extend(_command_section((*prefix, name), aliases, help_text, sub))
            walk(sub, (*prefix, name))

    walk(parser, ())
    return "\n".join(lines)


# --- result schemas -----------------------------------------------------------------------------------------------

def _import_package() -> None:
    """Import every module of interpscope (not `__main__`), so every Result subclass is defined."""
    import interpscope

    for module in pkgutil.walk_packages(interpscope.__path__, "interpscope."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)


def _all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return list(dict.fromkeys(found))


def result_classes() -> dict[str, list[type]]:
    """schema name -> the Result classes that declare or inherit it (document mixins and their dataclasses)."""
    _import_package()
    from interpscope.results import Result

    schemas: dict[str, list[type]] = {}
    for cls in _all_subclasses(Result):
        # the package's own results only: a test or a notebook may define Result subclasses in the same process
        if cls.SCHEMA and cls.__module__.split(".")[0] == "interpscope":
            schemas.setdefault(cls.SCHEMA, []).append(cls)
    return dict(sorted(schemas.items()))


def _leaf(classes: list[type]) -> type:
    """The class a schema's documents are made from: the most derived one (a dataclass where there is one)."""
    leaves = [c for c in classes if not any(other is not c and issubclass(other, c) for other in classes)]
    leaves.sort(key=lambda c: (not dataclasses.is_dataclass(c), c.__module__, c.__qualname__))
    return leaves[0]


def _field_comments(cls: type) -> dict[str, str]:
    """Trailing `# comments` of the annotated class attributes of cls and its bases (the nearest wins)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for match in re.finditer(r"^\s+(\w+)\s*:[^\n#]*#\s*(.+)$", source, re.MULTILINE):
            comments[match.group(1)] = match.group(2).strip()
    return comments


def _payload_keys(cls: type) -> tuple[list[str], list[str]] | None:
    """The top-level keys a custom `payload()` writes, read from its source: (literal keys, other spreads), or None
    when the class uses Result.payload (its dataclass fields) or the keys cannot be read."""
    from interpscope.results import Result

    owner = next(k for k in cls.__mro__ if "payload" in vars(k))
    if owner is Result:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(vars(owner)["payload"])))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            mapping = next((n for n in ast.walk(node.value) if isinstance(n, ast.Dict)), None)
            if mapping is None:
                return None
            keys, spreads = [], []
            for key, value in zip(mapping.keys, mapping.values, strict=True):
                if key is None:  # **spread
                    text = ast.unparse(value)
                    spreads.append("fields" if text == "to_plain(self)" else text)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys.append(key.value)
            return keys, spreads
    return None


def _fields(cls: type) -> list[tuple[str, str, str]]:
    """(key, type, note) of the top-level keys of the class's document (after `schema` and `schema_version`)."""
    types = {f.name: str(f.type) for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    public = [name for name in types if not name.startswith("_")]
    comments = _field_comments(cls)
    custom = _payload_keys(cls)
    if custom is None:
        names = public + [n for n in getattr(cls, "__plain_extras__", ()) if n not in public]
        spreads: list[str] = []
    else:
        literal, spreads = custom
        names = (public if "fields" in spreads else []) + [k for k in literal if k not in public or
                                                            "fields" not in spreads]
        spreads = [s for s in spreads if s != "fields"]
    rows = [(name, types.get(name, ""), comments.get(name, "")) for name in dict.fromkeys(names)]
    rows += [(f"(the keys of `{spread}`)", "", "") for spread in spreads]
    return rows


def schema_reference() -> str:
    """The schema reference: every result schema with its version, class and document keys."""
    schemas = result_classes()
    lines = ["| schema | version | class |", "|---|---|---|"]
    for name, classes in schemas.items():
        leaf = _leaf(classes)
        lines.append(f"| [{_code(name)}](#{name.replace('.', '')}) | {leaf.SCHEMA_VERSION} | "
                     f"{_code(leaf.__module__ + '.' + leaf.__qualname__)} |")
    lines.append("")
    for name, classes in schemas.items():
        leaf = _leaf(classes)
        bases = "".join(f"; document base {_code(c.__module__ + '.' + c.__qualname__)}"
                        for c in classes if c is not leaf and issubclass(leaf, c))
        where = _code(leaf.__module__ + "." + leaf.__qualname__)
        lines += [f"## {name}", "", f"Version {leaf.SCHEMA_VERSION}. Class {where}{bases}.", ""]
        doc = _first_paragraph(leaf.__doc__ if leaf.__doc__ and not leaf.__doc__.startswith(leaf.__name__ + "(")
                               else next((c.__doc__ for c in classes if c.__doc__ and
                                          not c.__doc__.startswith(c.__name__ + "(")), None))
        if doc:
            lines += [_escape(doc), ""]
        lines += ["| key | type | note |", "|---|---|---|",
                  f"| {_code('schema')} | str | {_code(repr(name))} |",
                  f"| {_code('schema_version')} | int | {leaf.SCHEMA_VERSION} |"]
        for key, annotation, note in _fields(leaf):
            key_cell = key if key.startswith("(") else _code(key)
            lines.append(f"| {key_cell} | {_code(annotation) if annotation else ''} | {_escape(note)} |")
        lines.append("")
    return "\n".join(lines)


# --- server-mode limits ---------------------------------------------------------------------------------------------

def limits_table() -> str:
    from interpscope.limits import SERVER_CEILINGS

    lines = ["| amount | environment variable | ceiling in server mode |", "|---|---|---|"]
    for name, (label, ceiling) in SERVER_CEILINGS.items():
        lines.append(f"| {_escape(label)} | {_code('INTERPSCOPE_LIMIT_' + name.upper())} | {ceiling:,} |")
    return "\n".join(lines)


GENERATORS = {"cli": cli_reference, "schemas": schema_reference, "limits": limits_table}
PLACEHOLDER = re.compile(r"^<!-- generated:(\w+) -->$", re.MULTILINE)


def fill(markdown: str) -> str:
    """The markdown with every `<!-- generated:NAME -->` line replaced by its generated text."""
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"unknown generated block {name!r} (one of {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return PLACEHOLDER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return fill(markdown)
