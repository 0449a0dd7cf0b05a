"""The `interpscope` command line. Each subcommand lives in its own module with a `register(subparsers)`.

Errors meant for the user print one line to stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from backend.config import InterpscopeError, check_data_dir
from backend.inputs import env_token_cap

COMMAND_MODULES = [
    "backend.cli.models_cmd",
    "backend.cli.explain_cmd",
    "backend.cli.sae_cmd",
    "backend.cli.neurons_cmd",
    "backend.cli.fourier_cmd",
    "backend.cli.flow_cmd",
]


class Parser(argparse.ArgumentParser):
    """argparse with the house error format: one line `interpscope: error: ...` and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.removeprefix("interpscope").strip()
        where = f"{command}: " if command else ""
        fail(f"{where}{message} (usage: `{self.prog} --help`)")


def fail(message: str) -> None:
    """Print one error line (newlines in the message folded) and exit with status 2."""
    print(f"interpscope: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


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
    try:
        env_token_cap()
        check_data_dir()
        return int(args.func(args) or 0)
    except InterpscopeError as err:
        print(f"interpscope: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interpscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
