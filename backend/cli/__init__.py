"""The `interpscope` command line. Each subcommand lives in its own module with a `register(subparsers)`.

Errors meant for the user print one line to stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from backend.config import InterpscopeError

COMMAND_MODULES = [
    "backend.cli.models_cmd",
    "backend.cli.explain_cmd",
    "backend.cli.sae_cmd",
    "backend.cli.neurons_cmd",
    "backend.cli.fourier_cmd",
    "backend.cli.flow_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interpscope", description="Look inside language models.")
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
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InterpscopeError as err:
        print(f"interpscope: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interpscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
