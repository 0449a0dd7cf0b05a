"""The `interpscope` command line. Each subcommand lives in its own module with a `register(subparsers)`.

Errors meant for the user print one line to stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import contextvars
import importlib
import sys
from typing import NoReturn

from interpscope.config import InterpscopeError, check_data_dir
from interpscope.inputs import env_token_cap

COMMAND_MODULES = [
    "interpscope.cli.models_cmd",
    "interpscope.cli.relevance_cmd",
    "interpscope.cli.sae_cmd",
    "interpscope.cli.entropy_neurons_cmd",
    "interpscope.cli.fourier_cmd",
    "interpscope.cli.flow_cmd",
    "interpscope.cli.heads_cmd",
    "interpscope.cli.patching_cmd",
    "interpscope.cli.graphs_cmd",
]


# (the command's name, the old name the person typed for it): errors name the command as it was typed
_TYPED_ALIAS: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("typed_alias", default=None)


class Parser(argparse.ArgumentParser):
    """argparse with the house error format: one line `interpscope: error: ...` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        alias = _TYPED_ALIAS.get()
        if alias is not None and (prog + " ").startswith(f"interpscope {alias[0]} "):
            prog = f"interpscope {alias[1]}" + prog[len(f"interpscope {alias[0]}"):]
        command = prog.removeprefix("interpscope").strip()
        where = f"{command}: " if command else ""
        fail(f"{where}{message} (usage: `{prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an option the chosen subcommand does not know is reported by that subcommand (its
        name and its --help), not by the top-level parser, which would point at `interpscope --help`; a command
        typed by its old name (explain, patch, graph, neurons) is named that way in the message."""
        argv = list(sys.argv[1:] if args is None else args)
        _TYPED_ALIAS.set(_alias_typed(self, argv))
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen_parser(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _alias_typed(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, str] | None:
    """(the command's name, the alias typed) when the first word of argv is a command's old name, else None."""
    first = next((word for word in argv if not word.startswith("-")), None)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and first in action.choices:
            name = action.choices[first].prog.removeprefix(f"{parser.prog} ")
            return (name, first) if name != first else None
    return None


def chosen_parser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand parser the parsed arguments selected (the parser itself without subcommands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None) if action.dest != argparse.SUPPRESS else None
            sub = action.choices.get(name) if isinstance(name, str) else None
            if sub is not None:
                return chosen_parser(sub, parsed)
    return parser


def fail(message: str) -> NoReturn:
    """Print one error line (newlines in the message folded) and exit with status 2."""
    print(f"interpscope: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def _clear_progress() -> None:
    """Erase the progress bars a failed command left on screen, so its error is the one line there."""
    tqdm_module = sys.modules.get("tqdm")
    if tqdm_module is None:
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        bar.leave = False
        bar.close()


def last_resort_message(err: BaseException) -> str | None:
    """One line for an error that escaped the commands' own checks: a file that cannot be read or written (a full
    disk, a permission, a folder where a file belongs), a bad value a library refused, memory that cannot be had.
    None for what is a bug (it keeps its traceback)."""
    import errno

    if isinstance(err, OSError):
        where = err.filename or "a file"
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"No space left on device writing {where}."
        return f"{err.strerror or err} ({where})." if err.filename else f"{err.strerror or err}."
    if isinstance(err, MemoryError):
        return "Out of memory: the request needs more memory than this machine has; ask for less."
    if isinstance(err, RecursionError):  # an input file nested thousands deep (JSON brackets): never ours
        return "An input is nested too deeply to read (thousands of nested brackets); check the file."
    if isinstance(err, RuntimeError):
        text = str(err)
        if "allocate" in text or "out of memory" in text.lower():
            return f"Out of memory: {text.splitlines()[0][:300]}"
        return None
    return f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else 'bad value'}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="interpscope", description="Look inside language models.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:  # a method's command not built yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
    from interpscope.cli.common import refuse_outputs_over_inputs

    try:
        refuse_outputs_over_inputs(args)
        env_token_cap()
        check_data_dir()
        return int(args.func(args) or 0)
    except InterpscopeError as err:
        _clear_progress()
        print(f"interpscope: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except (OSError, ValueError, MemoryError, RuntimeError) as err:
        message = last_resort_message(err)
        if message is None:
            raise
        _clear_progress()
        print(f"interpscope: error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interpscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
