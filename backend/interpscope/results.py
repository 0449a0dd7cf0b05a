"""Results are data: small dataclasses of numpy arrays + metadata, with one JSON/CSV conversion for export."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from interpscope import atomic


def to_plain(value: Any) -> Any:
    """Convert dataclasses, numpy and torch values into JSON-ready Python values (NaN/inf -> None).

    The one JSON path of the project: page exports and the command line's --json both go through it. A dataclass
    may list derived properties to include in `__plain_extras__` (e.g. a target's label)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        plain = {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                 if not f.name.startswith("_")}
        for name in getattr(type(value), "__plain_extras__", ()):  # derived facts a reader needs (labels)
            plain[name] = to_plain(getattr(value, name))
        return plain
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return to_plain(value.tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def document(value: Any) -> Any:
    """The JSON document for any value: a Result's `to_dict()` (schema, version, absent fields dropped), anything
    else made plain. The CLI's --json and the pages' JSON export both go through here."""
    return value.to_dict() if isinstance(value, Result) else to_plain(value)


def to_json(value: Any, indent: int | None = 2) -> str:
    return json.dumps(document(value), indent=indent, ensure_ascii=False)


class Result:
    """Base of every typed result the public API returns (a mixin for the result dataclasses).

    One result, one shape: `to_dict()` is the JSON document that the CLI's `--json`, the page's JSON export and the
    Python API all give, headed by the result's `schema` name and `schema_version`. A field whose value is None does
    not apply to this result (a Mamba map has no softmax share) and is absent from the document, never 0 or null.
    Subclasses set SCHEMA and SCHEMA_VERSION (bump the version when a key is renamed or its meaning changes), and
    may override `payload()` (the document's body), `tidy()` (the tidy table, which `table_rows()` gives) and `figure()`
    (the page's figure). A result with no chart to draw (a search's hits, a store build's summary) does not override
    `figure()`, which then raises NotImplementedError naming the result; a result with no table likewise raises from
    `table_rows()` / `to_frame()`. Inline in Jupyter (`_repr_html_`) a result shows its figure, else its table, else
    its JSON document, never an error."""

    SCHEMA: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 1
    # Keys that hold wall-clock timings: equal documents may differ only there.
    TIMING_KEYS: ClassVar[tuple[str, ...]] = ("seconds",)

    def payload(self) -> dict[str, Any]:
        plain = to_plain(self)
        return plain if isinstance(plain, dict) else {"value": plain}

    def to_dict(self) -> dict[str, Any]:
        if not self.SCHEMA:
            raise TypeError(f"{type(self).__name__} declares no SCHEMA")
        body = drop_absent(self.payload())
        return {"schema": self.SCHEMA, "schema_version": self.SCHEMA_VERSION, **body}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table_rows(self) -> list[dict[str, Any]]:
        """The tidy table's rows (the subclass's `tidy()`). Not named `rows`: results hold data fields and methods of
        that name (IG convergence, held-out runs, filter tables, neuron candidates)."""
        tidy = getattr(self, "tidy", None)
        if tidy is None:
            raise NotImplementedError(f"{type(self).__name__} has no table")
        return tidy()

    def to_frame(self):  # -> pandas.DataFrame (pandas imported only when asked)
        import pandas as pd

        return pd.DataFrame(to_plain(self.table_rows()))

    def to_csv(self, path: str | Path | None = None) -> str | None:
        """The tidy table as CSV text, or written (atomically) to `path`."""
        text = self.to_frame().to_csv(index=False)
        if path is None:
            return text
        atomic.write_text(path, text)
        return None

    def figure(self):  # -> plotly.graph_objects.Figure
        raise NotImplementedError(f"{type(self).__name__} has no figure; use to_frame() or to_dict()")

    def panel(self, name: str, data: Any) -> Panel:
        """One part of this result (a histogram, a top-k list) as its own document, naming this result's schema."""
        return Panel(of=self.SCHEMA, part=name, data=data)

    def _repr_html_(self) -> str:
        """Inline in Jupyter: the figure, or else the table. Every figure output carries plotly.js itself (~4.6 MB,
        never fetched): a saved notebook then renders offline whichever cells were re-run, cleared or reordered. (It
        used to be embedded in the first figure a kernel showed only, so a re-run cell or a saved notebook opened
        later showed blank figures.)"""
        try:
            figure = self.figure()
        except NotImplementedError:
            try:
                return self.to_frame().to_html(index=False)
            except NotImplementedError:
                from html import escape

                return f"<pre>{escape(self.to_json())}</pre>"
        return figure.to_html(full_html=False, include_plotlyjs=True)


def rows_of(data: Any) -> list[dict[str, Any]]:
    """A tidy table for plain data: a DataFrame's records, a list of records, a dict of equal-length columns, else
    flattened key/value rows (`key` a dotted path)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        return [{str(k): to_plain(v) for k, v in row.items()} for row in data.to_dict(orient="records")]
    plain = to_plain(data)
    if isinstance(plain, list) and plain and all(isinstance(row, dict) for row in plain):
        return plain
    if isinstance(plain, dict) and plain and all(isinstance(v, list) for v in plain.values()) and \
            len({len(v) for v in plain.values()}) == 1:
        names = list(plain)
        return [dict(zip(names, values, strict=True)) for values in zip(*plain.values(), strict=True)]
    return [{"key": key, "value": json.dumps(value) if isinstance(value, list) else value}
            for key, value in _flatten(plain)]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        rows: list[tuple[str, Any]] = []
        for key, inner in value.items():
            rows.extend(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        rows = []
        for i, inner in enumerate(value):
            rows.extend(_flatten(inner, f"{prefix}[{i}]"))
        return rows
    return [(prefix or "value", value)]


@dataclasses.dataclass
class Panel(Result):
    """One panel of a larger result, exported on its own (a feature card's histogram, a page's top-k bars): the
    panel's data under `data`, with `of` naming the schema of the result it is part of and `part` which part.
    The whole result's own document is the export of its main figure (and its CLI's --json)."""

    of: str
    part: str
    data: Any

    SCHEMA = "interpscope.panel"
    SCHEMA_VERSION = 1

    def __post_init__(self) -> None:
        if not self.of.startswith("interpscope."):
            raise ValueError(f"Panel.of must be a result schema (interpscope.*), not {self.of!r}")

    def payload(self) -> dict[str, Any]:
        data = self.data
        if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a DataFrame: its records
            data = rows_of(data)
        return {"of": self.of, "part": self.part, "data": to_plain(data)}

    def tidy(self) -> list[dict[str, Any]]:
        return rows_of(self.data)


def drop_absent(value: Any) -> Any:
    """Remove keys whose value is None from every mapping (a value that does not apply is absent); lists keep their
    positions (a None there is a non-finite number at that place)."""
    if isinstance(value, dict):
        return {k: drop_absent(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_absent(v) for v in value]
    return value


def without_timings(document: Any, keys: tuple[str, ...] = Result.TIMING_KEYS) -> Any:
    """The document with its timing keys removed at every depth: what equality between CLI, page and API means."""
    if isinstance(document, dict):
        return {k: without_timings(v, keys) for k, v in document.items() if k not in keys}
    if isinstance(document, list):
        return [without_timings(v, keys) for v in document]
    return document
