"""Signed token heatmap: the text with each token's background coloured by its relevance.

Red = positive (speaks for the target), blue = negative, intensity |R| / max |R| over the tokens that set the scale;
hovering a token shows its value. `excluded` positions (rows measured to carry a massive activation, a prepended BOS:
interpscope.sinks) never set the scale: they are drawn grey with a dashed outline and named in the legend with their
value and, from `reasons` (position -> why), why they are excluded.
`heatmap_figure` is the same view as a Plotly figure, for the export menu (PNG/SVG/PDF/HTML).
"""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

RED = (214, 39, 40)
BLUE = (31, 119, 180)
# Plotly colour scale matching the HTML view: blue (negative) - white - red (positive)
COLORSCALE = [[0.0, "rgb(31,119,180)"], [0.5, "rgb(255,255,255)"], [1.0, "rgb(214,39,40)"]]


def colour_scale(relevance: Sequence[float], excluded: Sequence[int] = ()) -> float:
    """max |R| over the tokens that set the colour scale (0 when none is left)."""
    values = np.asarray(relevance, dtype=float).copy()
    values[[i for i in excluded if 0 <= i < values.size]] = np.nan
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def normalised(relevance: Sequence[float], excluded: Sequence[int] = ()) -> np.ndarray:
    """Relevance divided by max |R| over the scaled tokens, in [-1, 1]; excluded positions become NaN."""
    values = np.asarray(relevance, dtype=float).copy()
    values[[i for i in excluded if 0 <= i < values.size]] = np.nan
    scale = colour_scale(relevance, excluded)
    return values / scale if scale > 0 else np.where(np.isfinite(values), 0.0, np.nan)


def _reason(index: int, reasons: Mapping[int, str] | None) -> str:
    return (reasons or {}).get(index, "excluded")


def excluded_note(tokens: Sequence[str], relevance: Sequence[float], excluded: Sequence[int],
                  reasons: Mapping[int, str] | None = None) -> str:
    """The sentence naming the excluded positions, why each is excluded, and their relevance."""
    if not excluded:
        return ""
    named = "; ".join(f"position {i} {tokens[i]!r} ({_reason(i, reasons)}; R = {float(relevance[i]):+.3g})"
                      for i in excluded if i < len(tokens))
    return f"Not used for the colour scale: {named}."


def _visible(token: str) -> str:
    return html.escape(token).replace("\n", "↵<br>").replace("\t", "⇥")


def _background(weight: float) -> str:
    if not np.isfinite(weight):
        return "rgba(200,200,200,0.35)"
    red, green, blue = RED if weight >= 0 else BLUE
    return f"rgba({red},{green},{blue},{min(1.0, abs(weight)):.3f})"


def heatmap_html(tokens: Sequence[str], relevance: Sequence[float], excluded: Sequence[int] = (),
                 reasons: Mapping[int, str] | None = None) -> str:
    """HTML of the heatmap: one span per token, hover title with its index and raw value."""
    weights = normalised(relevance, excluded)
    scale = colour_scale(relevance, excluded)
    spans = []
    for index, (token, value, weight) in enumerate(zip(tokens, relevance, weights, strict=True)):
        sink = index in excluded
        note = f" ({_reason(index, reasons)}: not used for the colour scale)" if sink else ""
        title = html.escape(f"token {index} {token!r}: R = {float(value):+.4f}{note}", quote=True)
        border = "outline:1px dashed #888;" if sink else ""
        spans.append(f'<span class="relevance-token" title="{title}" style="background:{_background(weight)};'
                     f'{border}border-radius:3px;padding:1px 0;font-family:monospace;white-space:pre-wrap">'
                     f"{_visible(token)}</span>")
    note = html.escape(excluded_note(tokens, relevance, excluded, reasons))
    legend = ('<div style="font-size:0.8em;color:#555;margin-top:6px">'
              f'<span style="background:rgba{RED + (0.8,)};padding:0 6px">&nbsp;</span> for the target &nbsp; '
              f'<span style="background:rgba{BLUE + (0.8,)};padding:0 6px">&nbsp;</span> against &nbsp; '
              f"(full colour at |R| = {scale:.3g}; hover a token for its value) {note}</div>")
    return f'<div class="relevance-heatmap" style="line-height:1.9">{"".join(spans)}</div>{legend}'


def heatmap_figure(tokens: Sequence[str], relevance: Sequence[float], title: str, excluded: Sequence[int] = (),
                   per_row: int = 12, reasons: Mapping[int, str] | None = None) -> go.Figure:
    """The heatmap as a Plotly figure: tokens in reading order, `per_row` to a row, coloured cells, and a colour
    bar in raw relevance (its ends at +-max |R| over the scaled tokens); excluded positions grey."""
    weights = normalised(relevance, excluded)
    values = np.asarray(relevance, dtype=float)
    n_rows = max(1, int(np.ceil(len(tokens) / per_row)))
    z = np.full((n_rows, per_row), np.nan)
    text = np.full((n_rows, per_row), "", dtype=object)
    hover = np.full((n_rows, per_row), "", dtype=object)
    for index, token in enumerate(tokens):
        row, col = divmod(index, per_row)
        z[row, col] = weights[index]
        text[row, col] = html.escape(token.replace("\n", "↵")) or "∅"
        sink = f" ({_reason(index, reasons)}: not used for the colour scale)" if index in excluded else ""
        hover[row, col] = html.escape(f"token {index} {token!r}: R = {values[index]:+.4f}{sink}")
    scale = colour_scale(relevance, excluded)
    fig = go.Figure(go.Heatmap(
        z=z * scale, text=text, customdata=hover, texttemplate="%{text}", textfont=dict(family="monospace", size=13),
        colorscale=COLORSCALE, zmin=-scale or -1, zmax=scale or 1, xgap=2, ygap=4,
        hovertemplate="%{customdata}<extra></extra>", colorbar=dict(title=dict(text="relevance R", side="right"))))
    note = excluded_note(tokens, relevance, excluded, reasons)
    fig.update_layout(title=title, template="plotly_white", height=140 + 42 * n_rows, width=1100,
                      margin=dict(l=20, r=20, t=60, b=40 if note else 20),
                      xaxis=dict(visible=False), yaxis=dict(visible=False, autorange="reversed"))
    if note:
        fig.add_annotation(text=html.escape(note), xref="paper", yref="paper", x=0, y=-0.02, showarrow=False,
                           xanchor="left", yanchor="top", font=dict(size=11, color="#555"))
    return fig
