"""Signed token heatmap: the text with each token's background coloured by its relevance.

Red = positive (speaks for the target), blue = negative, intensity |R| / max |R|; hovering a token shows its
value. `leave_out_first` drops the first token (often an attention sink) from the normalisation and greys it.
`heatmap_figure` is the same view as a Plotly figure, for the export menu (PNG/SVG/PDF/HTML).
"""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

RED = (214, 39, 40)
BLUE = (31, 119, 180)
# Plotly colour scale matching the HTML view: blue (negative) - white - red (positive)
COLORSCALE = [[0.0, "rgb(31,119,180)"], [0.5, "rgb(255,255,255)"], [1.0, "rgb(214,39,40)"]]


def normalised(relevance: Sequence[float], leave_out_first: bool = False) -> np.ndarray:
    """Relevance divided by max |R| (over the kept tokens), in [-1, 1]; the left-out first token becomes NaN."""
    values = np.asarray(relevance, dtype=float).copy()
    if leave_out_first and values.size:
        values[0] = np.nan
    finite = values[np.isfinite(values)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    return values / scale if scale > 0 else np.where(np.isfinite(values), 0.0, np.nan)


def _visible(token: str) -> str:
    return html.escape(token).replace("\n", "↵<br>").replace("\t", "⇥")


def _background(weight: float) -> str:
    if not np.isfinite(weight):
        return "rgba(200,200,200,0.35)"
    red, green, blue = RED if weight >= 0 else BLUE
    return f"rgba({red},{green},{blue},{min(1.0, abs(weight)):.3f})"


def heatmap_html(tokens: Sequence[str], relevance: Sequence[float], leave_out_first: bool = False) -> str:
    """HTML of the heatmap: one span per token, hover title with its index and raw value."""
    weights = normalised(relevance, leave_out_first)
    spans = []
    for index, (token, value, weight) in enumerate(zip(tokens, relevance, weights)):
        note = " (left out)" if not np.isfinite(weight) else ""
        title = html.escape(f"token {index} {token!r}: R = {float(value):+.4f}{note}", quote=True)
        spans.append(f'<span class="relevance-token" title="{title}" style="background:{_background(weight)};'
                     f'border-radius:3px;padding:1px 0;font-family:monospace;white-space:pre-wrap">'
                     f"{_visible(token)}</span>")
    legend = ('<div style="font-size:0.8em;color:#555;margin-top:6px">'
              f'<span style="background:rgba{RED + (0.8,)};padding:0 6px">&nbsp;</span> for the target &nbsp; '
              f'<span style="background:rgba{BLUE + (0.8,)};padding:0 6px">&nbsp;</span> against &nbsp; '
              "(colour: relevance / max |relevance|; hover a token for its value)</div>")
    return f'<div class="relevance-heatmap" style="line-height:1.9">{"".join(spans)}</div>{legend}'


def token_heatmap(tokens: Sequence[str], relevance: Sequence[float], leave_out_first: bool = False) -> None:
    """Show the heatmap in the page."""
    import streamlit as st

    st.markdown(heatmap_html(tokens, relevance, leave_out_first), unsafe_allow_html=True)


def heatmap_figure(tokens: Sequence[str], relevance: Sequence[float], title: str, leave_out_first: bool = False,
                   per_row: int = 12) -> go.Figure:
    """The heatmap as a Plotly figure: tokens in reading order, `per_row` to a row, coloured cells, colorbar."""
    weights = normalised(relevance, leave_out_first)
    values = np.asarray(relevance, dtype=float)
    n_rows = max(1, int(np.ceil(len(tokens) / per_row)))
    z = np.full((n_rows, per_row), np.nan)
    text = np.full((n_rows, per_row), "", dtype=object)
    hover = np.full((n_rows, per_row), "", dtype=object)
    for index, token in enumerate(tokens):
        row, col = divmod(index, per_row)
        z[row, col] = weights[index]
        text[row, col] = html.escape(token.replace("\n", "↵")) or "∅"
        hover[row, col] = html.escape(f"token {index} {token!r}: R = {values[index]:+.4f}")
    scale = float(np.nanmax(np.abs(values[1:] if leave_out_first else values))) if len(values) else 0.0
    fig = go.Figure(go.Heatmap(
        z=z, text=text, customdata=hover, texttemplate="%{text}", textfont=dict(family="monospace", size=13),
        colorscale=COLORSCALE, zmin=-1, zmax=1, xgap=2, ygap=4, hovertemplate="%{customdata}<extra></extra>",
        colorbar=dict(title=dict(text="R / max|R|", side="right"), tickvals=[-1, 0, 1],
                      ticktext=[f"-{scale:.3g}", "0", f"+{scale:.3g}"])))
    fig.update_layout(title=title, template="plotly_white", height=120 + 42 * n_rows, width=1100,
                      margin=dict(l=20, r=20, t=60, b=20),
                      xaxis=dict(visible=False), yaxis=dict(visible=False, autorange="reversed"))
    return fig
