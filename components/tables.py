"""Tables whose headers and cells are not cut off: each column as wide as its header and its longest cell."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

CHAR_PX = 7.5  # one character of the table font, in pixels
PAD_PX = 28  # cell padding, and room for the sort arrow in the header
MAX_PX = 520  # a longer text cell is shown up to this width (its full text is in the export and on hover)


def _formatted(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fit_columns(frame: pd.DataFrame, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """column_config for st.dataframe: every column given a pixel width that fits its header and (up to MAX_PX)
    its longest cell; a column config already given keeps its label, format and help, and gets the width."""
    import streamlit as st

    out: dict[str, Any] = dict(config or {})
    for name in frame.columns:
        given = out.get(name)
        cells = [len(_formatted(v)) for v in frame[name].head(500)]
        header = len(str((given or {}).get("label") or name)) if isinstance(given, dict) or given is None else 0
        width = int(min(MAX_PX, max([header, *cells]) * CHAR_PX + PAD_PX))
        if given is None:
            out[name] = st.column_config.Column(width=width)
        elif isinstance(given, dict):
            out[name] = {**given, "width": given.get("width") or width}
    return out
