"""The export menu under every figure: the figure as PNG/SVG/PDF/HTML, the data behind it as JSON/CSV.

Static images come from plotly + kaleido driving Debian's Chromium (no browser download). One kaleido
server is started lazily and reused, so an export takes ~0.2 s instead of ~3 s. Every file is produced only
when its button is clicked (deferred download), so the page itself never pays for exports.
"""
from __future__ import annotations

import io
import json
import threading
from functools import partial
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from interpscope.results import to_json, to_plain

IMAGE_FORMATS = ("png", "svg", "pdf")
MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
        "json": "application/json", "csv": "text/csv"}
_KALEIDO_LOCK = threading.Lock()
_server_started = False


def _ensure_kaleido_server() -> None:
    global _server_started
    if _server_started:
        return
    try:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        _server_started = True
    except Exception:  # noqa: BLE001 - fall back to one browser per export
        _server_started = False


def figure_bytes(fig: go.Figure, fmt: str, scale: float = 2.0) -> bytes:
    """Render a figure to png/svg/pdf bytes, or a self-contained interactive HTML page."""
    fmt = fmt.lower()
    if fmt == "html":
        return pio.to_html(fig, include_plotlyjs=True, full_html=True).encode("utf-8")
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}")
    with _KALEIDO_LOCK:
        _ensure_kaleido_server()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pio.to_image(fig, format=fmt, scale=scale if fmt == "png" else 1.0,
                                width=fig.layout.width or 1000, height=fig.layout.height or 550)


def data_json(data: Any) -> bytes:
    """The page's JSON export: the same document as the CLI's --json and the API's `to_dict()`."""
    return to_json(data).encode("utf-8")


def data_csv(data: Any) -> bytes:
    """A tidy table for the data: a result's own rows (its `tidy()`: one row per token, feature, ...), DataFrames as
    they are, lists of records, dicts of equal-length columns, otherwise flattened key/value rows."""
    import pandas as pd

    if callable(getattr(data, "tidy", None)):
        frame = pd.DataFrame(to_plain(data.tidy()))
    elif isinstance(data, pd.DataFrame):
        frame = data
    else:
        plain = to_plain(data)
        if isinstance(plain, list) and plain and all(isinstance(row, dict) for row in plain):
            frame = pd.DataFrame(plain)
        elif isinstance(plain, dict) and plain and all(isinstance(v, list) for v in plain.values()) and \
                len({len(v) for v in plain.values()}) == 1:
            frame = pd.DataFrame(plain)
        else:
            frame = pd.DataFrame(_flatten(plain), columns=["key", "value"])
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode("utf-8")


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
    return [(prefix or "value", json.dumps(value) if isinstance(value, list) else value)]


def export_menu(fig: go.Figure | None, data: Any, key: str, filename: str) -> None:
    """A row of download buttons: figure (PNG, SVG, PDF, HTML) and data (JSON, CSV)."""
    import streamlit as st

    formats = (["png", "svg", "pdf", "html"] if fig is not None else []) + (["json", "csv"] if data is not None else [])
    if not formats:
        return
    # a wrapping row of content-width buttons: labels are never cut, however narrow the column (compare mode)
    row = st.container(horizontal=True, wrap=True, gap="small", vertical_alignment="center")
    row.caption("Export", width="content")
    for fmt in formats:
        if fmt == "json":
            producer = partial(data_json, data)
        elif fmt == "csv":
            producer = partial(data_csv, data)
        else:
            producer = partial(figure_bytes, fig, fmt)
        row.download_button(fmt.upper(), data=producer, file_name=f"{filename}.{fmt}", mime=MIME[fmt],
                            key=f"export-{key}-{fmt}", on_click="ignore", width="content")
