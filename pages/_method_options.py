"""A relevance method's options as widgets and link parameters, built from the OptionSpecs the method registers
(interpscope.relevance.options): the relevance page, its compare mode and its whole-file section call these, so a
method added by registration gets its controls without touching a page. The command line's twin is
interpscope.cli.method_options."""
from __future__ import annotations

from typing import Any

import streamlit as st

from interpscope.limits import check_amounts
from interpscope.relevance.methods import MethodOptions, OptionSpec, get_method, option_specs
from pages._common import Param


def option_params(key: str, prefix: str = "") -> list[Param]:
    """Every registered option in the URL: widget f"{key}-{spec.key}", URL name prefix + spec.url (the relevance
    page's first method has no prefix, its compare mode's second method "second_")."""
    return [Param(f"{key}-{spec.key}", f"{prefix}{spec.url}", spec.default, spec.kind, choices=spec.values,
                  low=spec.low, high=spec.high) for spec in option_specs().values()]


def option_widget(container: Any, spec: OptionSpec, key: str) -> Any:
    """One option's widget in `container` (its value starts at the spec's default unless a link or an earlier run
    set it); the value as the spec's kind."""
    st.session_state.setdefault(key, spec.default)
    help_text = spec.help or None
    if spec.choices is not None:
        return container.selectbox(spec.label, spec.values, format_func=spec.choice_label, key=key, help=help_text)
    if spec.kind is bool:
        return bool(container.toggle(spec.label, key=key, help=help_text))
    if spec.kind is int:
        low = None if spec.low is None else int(spec.low)
        high = None if spec.high is None else int(spec.high)
        return int(container.number_input(spec.label, low, high, key=key, help=help_text))
    if spec.kind is float:
        low = None if spec.low is None else float(spec.low)
        high = None if spec.high is None else float(spec.high)
        return float(container.number_input(spec.label, low, high, key=key, help=help_text))
    return str(container.text_input(spec.label, key=key, help=help_text))


def method_options(key: str, method: str) -> MethodOptions:
    """The options `method` declares, one column each (none for a method without options), checked against a shared
    server's ceilings (interpscope.limits); the MethodOptions to run it with."""
    specs = get_method(method).options
    values = {}
    if specs:
        for column, spec in zip(st.columns(max(2, len(specs))), specs, strict=False):
            values[spec.name] = option_widget(column, spec, f"{key}-{spec.key}")
    check_amounts(**{spec.ceiling: values[spec.name] for spec in specs if spec.ceiling})
    return MethodOptions(**values)
