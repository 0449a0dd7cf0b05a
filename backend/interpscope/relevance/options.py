"""A method's options as data: each `Method` names its `OptionSpec`s, and one `MethodOptions` carries their values.

A spec says everything a page, a link or the command line needs to offer the option: its type, default, allowed
range or choices, widget label and help, URL name, widget key and command-line flag, and the words its validation
message uses. The relevance page, the whole-file view, compare mode and `interpscope explain` build their widgets,
URL parameters and flags from the registered specs (pages/_method_options.py, interpscope.cli.method_options), so a
method added by registration gets its controls everywhere. Two methods may share an option (Integrated Gradients and
occlusion share the baseline) by naming the same spec.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from interpscope.config import InterpscopeError


@dataclass(frozen=True)
class OptionSpec:
    """One option of a method.

    name: the keyword (MethodOptions(ig_steps=8), options.ig_steps) and the command line's dest. kind: int, float,
    str or bool. low/high: inclusive bounds of a number (None: unbounded). choices: (value, label) pairs of a str
    option. label/help: the widget's. noun/unit: what the validation message calls it ("IG steps", "tokens").
    flag, url, key: the command-line flag (default --name-with-dashes), the URL parameter (default name) and the
    widget key's suffix (default name-with-dashes); the built-in ones keep their historical spellings. ceiling: the
    interpscope.limits amount a shared server caps it by (None: not capped).
    """

    name: str
    kind: type
    default: Any
    label: str
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[tuple[str, str], ...] | None = None
    noun: str = ""
    unit: str = ""
    flag: str = ""
    url: str = ""
    key: str = ""
    ceiling: str | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith("_") or self.name in RESERVED:
            raise ValueError(f"An option name must be an identifier other than {', '.join(RESERVED)} "
                             f"(got {self.name!r}).")
        if self.kind not in (int, float, str, bool):
            raise ValueError(f"Option {self.name!r}: kind must be int, float, str or bool.")
        defaults = {"noun": self.label, "flag": "--" + self.name.replace("_", "-"), "url": self.name,
                    "key": self.name.replace("_", "-")}
        for field_name, value in defaults.items():
            if not getattr(self, field_name):
                object.__setattr__(self, field_name, value)
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple((str(v), str(t)) for v, t in self.choices))
        problem = self.problem(self.default)
        if problem:
            raise ValueError(f"Option {self.name!r}: its default is not allowed: {problem}")

    @property
    def values(self) -> list[str] | None:
        """The allowed values of a choice option (None: any value of its kind within its bounds)."""
        return None if self.choices is None else [value for value, _ in self.choices]

    def choice_label(self, value: str) -> str:
        return dict(self.choices or ()).get(value, str(value))

    def problem(self, value: Any) -> str | None:
        """Why `value` is not allowed (one sentence naming the option, the rule and the value), or None."""
        unit = f" {self.unit}" if self.unit else ""
        if self.choices is not None:
            if value not in (self.values or []):
                return f"Unknown {self.noun} {value!r}: choose one of {', '.join(self.values or [])}."
            return None
        if self.kind is bool:
            return None if isinstance(value, bool) else f"{self.noun} must be true or false (got {value!r})."
        if self.kind is str:
            return None if isinstance(value, str) else f"{self.noun} must be text (got {value!r})."
        if self.kind is int:
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
                and abs(value) != float("inf")
            what = "a number"
        if ok and (self.low is None or value >= self.low) and (self.high is None or value <= self.high):
            return None
        bounds = (f" from {_number(self.low)} to {_number(self.high)}" if self.low is not None and self.high is not None
                  else f" of at least {_number(self.low)}" if self.low is not None
                  else f" of at most {_number(self.high)}" if self.high is not None else "")
        return f"{self.noun} must be {what}{bounds}{unit} (got {value!r})."


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# names MethodOptions uses itself: an option may not take them
RESERVED = ("pad_token_id", "get", "given", "replace", "checked", "to_dict", "for_method")

# the option specs of the registered methods, by name (interpscope.relevance.methods keeps it up to date)
SpecLookup = Callable[[], Mapping[str, OptionSpec]]
_lookup: SpecLookup = dict


def use_registry(lookup: SpecLookup) -> None:
    """Where MethodOptions finds the registered specs (set once by interpscope.relevance.methods)."""
    global _lookup
    _lookup = lookup


class MethodOptions:
    """The values of the methods' options, by option name; an option not given reads as its spec's default.

    One object serves every method: each method's compute reads its own options (options.ig_steps, or
    options["ig_steps"]). Immutable and hashable (a cache key), equal when the values differ from the defaults in
    the same way: MethodOptions(ig_steps=32) == MethodOptions() while 32 is the default. pad_token_id is filled from
    the tokenizer by the caller (replace(pad_token_id=...)).
    """

    __slots__ = ("_values", "pad_token_id")
    _values: dict[str, Any]
    pad_token_id: int | None

    def __init__(self, pad_token_id: int | None = None, **values: Any) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "pad_token_id", pad_token_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy/pickle probe dunders before __init__ ran: never look those up
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"No method option {name!r} (registered: {', '.join(_lookup()) or 'none'}).") \
                from None

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        spec = _lookup().get(name)
        if spec is None:
            raise KeyError(name)
        return spec.default

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("MethodOptions is immutable: use replace(...)")

    def given(self) -> dict[str, Any]:
        """The values given that differ from their spec's default (or have no registered spec)."""
        specs = _lookup()
        return {name: value for name, value in self._values.items()
                if name not in specs or value != specs[name].default or type(value) is not type(specs[name].default)}

    def replace(self, **changes: Any) -> MethodOptions:
        """A copy with some values (or pad_token_id) changed."""
        pad = changes.pop("pad_token_id", self.pad_token_id)
        return MethodOptions(pad_token_id=pad, **{**self._values, **changes})

    def for_method(self, specs: Iterable[OptionSpec]) -> dict[str, Any]:
        """The values of these options (a method's `options`), defaults filled in."""
        return {spec.name: self[spec.name] for spec in specs}

    def to_dict(self) -> dict[str, Any]:
        """Every registered option's value and pad_token_id: the settings a saved run records."""
        return {**{name: self[name] for name in _lookup()}, **self._values, "pad_token_id": self.pad_token_id}

    def checked(self) -> MethodOptions:
        """Self, or InterpscopeError naming the first option whose value its spec does not allow."""
        specs = _lookup()
        for name, value in self._values.items():
            spec = specs.get(name)
            if spec is None:
                raise InterpscopeError(f"Unknown method option {name!r}: the registered methods take "
                                       f"{', '.join(specs) or 'no options'}.")
            problem = spec.problem(value)
            if problem:
                raise InterpscopeError(problem)
        return self

    def _key(self) -> tuple:
        return tuple(sorted(self.given().items(), key=lambda item: item[0])), self.pad_token_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodOptions) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        shown = [f"{name}={value!r}" for name, value in self._values.items()]
        if self.pad_token_id is not None:
            shown.append(f"pad_token_id={self.pad_token_id!r}")
        return f"MethodOptions({', '.join(shown)})"

    def __reduce__(self) -> tuple:
        return _rebuild, (self.pad_token_id, dict(self._values))


def _rebuild(pad_token_id: int | None, values: dict[str, Any]) -> MethodOptions:
    return MethodOptions(pad_token_id=pad_token_id, **values)
