"""Drawing relevance graphs (information flow, feature circuits): edges, labels that do not overlap, token axis.

Edges: one line per edge, width ~ |relevance|, red for, blue against. Nodes of one row are spread so that their
labels fit (a label's width in the row's x units, for a graph drawn PLOT_PX wide), every other crowded label goes
under its point, and the input tokens are the x axis' tick labels, slanted, so a long prompt's tokens never
overlap either.
"""
from __future__ import annotations

from collections.abc import Sequence

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


def token_axis(tokens: Sequence[str]) -> dict:
    """An x axis whose tick labels are the input tokens at positions 0..n-1, slanted (never overlapping)."""
    def shown(token: str) -> str:  # node labels hold the token's repr: drop its quotes, show spaces as ␣
        quoted = len(token) >= 2 and token[0] == token[-1] and token[0] in "'\""
        return (token[1:-1] if quoted else repr(token)[1:-1]).replace(" ", "␣") or "∅"
    text = [shown(t) for t in tokens]
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=text, tickangle=-45, showgrid=False,
                zeroline=False, title=None)
