"""The export menu under every figure: the figure as PNG/SVG/PDF/HTML, the data behind it as JSON/CSV.

Static images come from plotly + kaleido driving Debian's Chromium (no browser download). One kaleido
server is started lazily and reused, so an export takes ~0.2 s instead of ~3 s. Every file is produced only
when its button is clicked (deferred download), so the page itself never pays for exports.
"""
from __future__ import annotations

import io
import threading
from functools import partial

import plotly.graph_objects as go
import plotly.io as pio

from interpscope.results import Result, rows_of, to_json

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


def data_json(data: Result) -> bytes:
    """The page's JSON export: the same document as the CLI's --json and the API's `to_dict()`."""
    return to_json(data).encode("utf-8")


def data_csv(data: Result) -> bytes:
    """The result's tidy table (its `table_rows()`: one row per token, feature, ...) as CSV."""
    import pandas as pd

    try:
        frame = data.to_frame()
    except NotImplementedError:  # a result without a table of its own: its document as key/value rows
        frame = pd.DataFrame(rows_of(data.to_dict()))
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode("utf-8")


def export_menu(fig: go.Figure | None, data: Result | None, key: str, filename: str) -> None:
    """A row of download buttons: figure (PNG, SVG, PDF, HTML) and data (JSON, CSV). The data is always a Result
    (one document with a schema and version): a whole result, or one part of it as `result.panel(name, data)` /
    `Panel(of=schema, part=name, data=...)`."""
    import streamlit as st

    if data is not None and not isinstance(data, Result):
        raise TypeError(f"export_menu({key!r}) takes a Result, not {type(data).__name__}: wrap a part of a result as "
                        "result.panel(name, data) or interpscope.results.Panel(of=schema, part=name, data=data)")
    producers: dict[str, partial[bytes]] = {}
    if fig is not None:
        producers |= {fmt: partial(figure_bytes, fig, fmt) for fmt in ("png", "svg", "pdf", "html")}
    if data is not None:
        producers |= {"json": partial(data_json, data), "csv": partial(data_csv, data)}
    if not producers:
        return
    # a wrapping row of content-width buttons: labels are never cut, however narrow the column (compare mode)
    row = st.container(horizontal=True, wrap=True, gap="small", vertical_alignment="center")
    row.caption("Export", width="content")
    for fmt, producer in producers.items():
        row.download_button(fmt.upper(), data=producer, file_name=f"{filename}.{fmt}", mime=MIME[fmt],
                            key=f"export-{key}-{fmt}", on_click="ignore", width="content")
