"""The registered methods' options as command-line flags (one per OptionSpec, the spec's own flag: --ig-steps,
--baseline, --occlusion-window for the shipped baselines), and the MethodOptions the parsed flags give. A method
added by registration gets its flags here without touching a command."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from interpscope.cli.argtypes import finite_float, int_at_least


def _type(spec) -> Callable[[str], Any]:
    """Parse a flag's text as the spec's kind; a whole number with a lower bound is refused below it while the
    arguments are parsed, the rest of the range by MethodOptions.checked (the same message as the pages')."""
    if spec.choices is not None or spec.kind is str:
        return str
    if spec.kind is int:
        return int_at_least(int(spec.low) if spec.low is not None else -(2 ** 63))
    return finite_float


def add_method_options(parser: argparse.ArgumentParser) -> None:
    """One argument group, a flag per registered option (its dest the option's name), saying which methods take it."""
    from interpscope.relevance.methods import METHODS, methods_taking, option_specs

    specs = option_specs()
    if not specs:
        return
    takers = ", ".join(m.name for m in METHODS.values() if m.options)
    group = parser.add_argument_group(f"method settings ({takers})")
    for spec in specs.values():
        used_by = ", ".join(m.name for m in methods_taking(spec.name))
        if spec.kind is bool:
            group.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction, default=spec.default,
                               help=f"{spec.help or spec.label} ({used_by}; default {spec.default})")
            continue
        group.add_argument(spec.flag, dest=spec.name, type=_type(spec), default=spec.default, choices=spec.values,
                           help=f"{spec.help or spec.label} ({used_by}; default {spec.default})")


def options_from_args(args: argparse.Namespace):
    """The MethodOptions of the parsed flags, checked (InterpscopeError names the option, its rule and the value)."""
    from interpscope.relevance.methods import MethodOptions, option_specs

    return MethodOptions(**{name: getattr(args, name) for name in option_specs() if hasattr(args, name)}).checked()
