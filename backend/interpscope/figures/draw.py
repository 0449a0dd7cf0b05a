"""Drawing relevance graphs (information flow, feature circuits): edges, labels that do not overlap, token axis.

Edges: one line per edge, width ~ |relevance|, red for, blue against. Nodes of one row are spread so that their
labels fit (a label's width in the row's x units, for a graph drawn PLOT_PX wide), every other crowded label goes
under its point, and the input tokens are the x axis' tick labels, slanted, so a long prompt's tokens never
overlap either.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go

RED, BLUE = "#d6604d", "#4393c3"
PLOT_PX = 1000  # the width the graphs are laid out for (they fill the page's width)
CHAR_PX = 7.0  # one character of a node label (12 px font)


def add_edges(fig: go.Figure, edges: Sequence, position: dict[str, tuple[float, float]], width: float = 6.0) -> float:
    """Draw the edges whose ends are placed (weakest first, so strong ones lie on top); returns the largest |R|."""
    biggest = max([abs(e.relevance) for e in edges] or [1.0]) or 1.0
    for edge in sorted(edges, key=lambda e: abs(e.relevance)):
        if edge.source not in position or edge.target not in position:
            continue
        (x0, y0), (x1, y1) = position[edge.source], position[edge.target]
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                                 opacity=0.45, line=dict(width=0.5 + width * abs(edge.relevance) / biggest,
                                                         color=RED if edge.relevance >= 0 else BLUE)))
    return biggest


def spread_row(wanted: Sequence[tuple[float, str]], span: float, marker_px: float = 24.0,
               alternate: bool = True) -> tuple[list[float], set[int]]:
    """x positions for one row of labelled nodes wanted at x, and which labels go under their point: neighbours at
    least a marker apart, and closer than a label's width only with their labels on opposite sides (alternating),
    so labels on one side are at least one label width apart. Without `alternate` (rows stacked closely, where a
    label under its point would meet the row below's), every label stays above and neighbours a label width apart."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i][0])
    xs = [0.0] * len(wanted)
    below: set[int] = set()
    for _ in range(2):  # spreading widens the row, which narrows a unit: lay out again at the wider span
        units_per_px = max(span, 1.0) / PLOT_PX
        previous, previous_below = None, True
        for i in order:
            x, label = wanted[i]
            half = (len(label) * CHAR_PX / 2 + 4) * units_per_px
            if previous is None:
                xs[i], previous_below = x, False
            else:
                px, phalf = previous
                x = max(x, px + max(marker_px * units_per_px, half + phalf if not alternate else max(half, phalf)))
                crowded = alternate and x - px < half + phalf
                previous_below = (not previous_below) if crowded else False
                xs[i] = x
            if previous_below:
                below.add(i)
            else:
                below.discard(i)
            previous = (xs[i], half)
        span = max(span, max(xs, default=0.0) + 1)
    return xs, below


def log_ticks(values: Iterable[Any]) -> dict:
    """Ticks for a log axis over `values` (positive finite ones), every label a full number: "1 2 5 10 20 50" when
    the values span up to 2.3 decades, "0.01 0.03 0.1 0.3 1" up to 3.3, each power of ten (as 10 to the power)
    beyond. Plotly's own log ticks label 2 and 5 by their leading digit alone ("100 5 2 10 5 2 1"). Empty for no
    positive value (plotly's defaults then)."""
    shown = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if not shown:
        return {}
    span = math.log10(max(shown)) - math.log10(min(shown))
    if span > 3.3:
        return dict(tickmode="linear", dtick=1, exponentformat="power")  # log axes: dtick 1 = each power of 10
    low, high = math.floor(math.log10(min(shown))), math.ceil(math.log10(max(shown)))
    high = max(high, low + 1)
    steps = (1, 2, 5) if span <= 2.3 else (1, 3)
    ticks = [float(f"{m}e{e}") for e in range(low, high + 1) for m in steps]  # 0.3, not 0.30000000000000004
    ticks = [t for t in ticks if t <= float(f"1e{high}")]
    return dict(tickmode="array", tickvals=ticks, ticktext=[tick_text(t) for t in ticks])


def tick_text(value: float) -> str:
    """A tick's full value, short: 0.002, 0.5, 20, 5k, 2M, 1e-06."""
    if value >= 1e6 and value < 1e10:
        return f"{value / 1e6:g}M"
    if value >= 1e3 and value < 1e6:
        return f"{value / 1e3:g}k"
    if 1e-4 <= value < 1e3:
        return f"{value:.4f}".rstrip("0").rstrip(".") if value < 1 else f"{value:g}"
    return f"{value:.0e}"


def click_targets(x: Sequence, y: Sequence, customdata: Sequence, hovertext: Sequence[str] | None = None,
                  **kwargs: Any) -> go.Scatter:
    """Invisible markers at the centres of a heatmap's cells, carrying each cell's customdata: a heatmap emits no
    selection when clicked (Streamlit's on_select needs a point), these do. The heatmap's own hover is skipped
    (hoverinfo "skip") and these carry it; with layout.hoverdistance -1 a click anywhere in a cell is nearest its
    own centre. Selection never restyles them (they stay invisible)."""
    return go.Scatter(x=list(x), y=list(y), mode="markers", customdata=list(customdata), showlegend=False,
                      hovertext=list(hovertext) if hovertext is not None else None,
                      hoverinfo="text" if hovertext is not None else "none", name="cells",
                      marker=dict(size=8, color="rgba(0,0,0,0)", opacity=0),
                      selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0)), **kwargs)


def token_axis(tokens: Sequence[str]) -> dict:
    """An x axis whose tick labels are the input tokens at positions 0..n-1, slanted (never overlapping)."""
    def shown(token: str) -> str:  # node labels hold the token's repr: drop its quotes, show spaces as ␣
        quoted = len(token) >= 2 and token[0] == token[-1] and token[0] in "'\""
        return (token[1:-1] if quoted else repr(token)[1:-1]).replace(" ", "␣") or "∅"
    text = [shown(t) for t in tokens]
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=text, tickangle=-45, showgrid=False,
                zeroline=False, title=None)
