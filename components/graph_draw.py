"""Drawing a relevance graph's edges: one line per edge, width ~ |relevance|, red for, blue against."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

RED, BLUE = "#d6604d", "#4393c3"


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
