"""Figures of the attention-heads view: one head's pattern (queries down, keys across; excluded key columns named
and kept out of the colour scale), and a layers x heads grid of one per-head score (each cell carries "L.H" in its
customdata, so a click opens that head)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from interpscope.figures.draw import click_targets

SCORE_NAMES = {"previous_token": "previous-token attention", "self": "attention to itself",
               "sinks": "attention to excluded positions", "entropy": "row entropy (nats)",
               "induction": "induction score", "duplicate_token": "duplicate-token score"}


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis labels 'position:token' (spaces shown as ␣, control characters escaped)."""
    return [f"{i}:{repr(t)[1:-1].replace(' ', '␣') or '∅'}" for i, t in enumerate(tokens)]


def pattern_scale(pattern: np.ndarray, excluded: Sequence[int]) -> float:
    """The colour scale's top: the largest probability on a key that is not excluded (1.0 when none is left)."""
    keep = np.ones(pattern.shape[-1], dtype=bool)
    keep[[k for k in excluded if 0 <= k < keep.size]] = False
    values = pattern[:, keep]
    top = float(values.max()) if values.size else 0.0
    return top if top > 0 else 1.0


def pattern_figure(tokens: Sequence[str], pattern: np.ndarray, excluded: Sequence[int], title: str,
                   sinks: Sequence[dict] = ()) -> go.Figure:
    """A head's attention probabilities: query rows, key columns. Hover gives query and key tokens and the true
    probability; excluded key columns (sinks, a prepended BOS) are outlined, named above, and clipped in colour."""
    labels = token_labels(tokens)
    top = pattern_scale(pattern, excluded)
    fig = go.Figure(go.Heatmap(z=pattern, x=labels, y=labels, colorscale="Blues", zmin=0, zmax=top,
                               colorbar=dict(title=dict(text="attention", side="right")),
                               hovertemplate="query %{y}<br>key %{x}<br>p = %{z:.3f}<extra></extra>"))
    named = {int(row["position"]): row for row in sinks}
    for position in excluded:
        if not 0 <= position < len(labels):
            continue
        fig.add_vrect(x0=position - 0.5, x1=position + 0.5, line=dict(color="#d6604d", width=1.5),
                      fillcolor="rgba(0,0,0,0)")
        reason = "prepended BOS" if named.get(position, {}).get("prepended") else "sink"
        fig.add_annotation(x=labels[position], y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"{reason} (not in scale)", font=dict(color="#d6604d", size=11))
    n = len(labels)
    fig.update_layout(title=dict(text=f"{title}: colour scale 0..{top:.3f} (excluded keys clipped)", y=0.98),
                      template="plotly_white", height=min(900, max(380, 140 + 14 * n)),
                      xaxis=dict(title="key", tickangle=-45, type="category"),
                      yaxis=dict(title="query", autorange="reversed", type="category"),
                      margin=dict(l=90, r=20, t=80, b=110))
    return fig


def grid_figure(grid: np.ndarray, score: str, chance: float | None, title: str | None = None,
                shown: str | None = None) -> go.Figure:
    """Layers (rows) x heads (columns) of one per-head score; chance (a uniform causal pattern) in the title. Each
    cell is clickable: an invisible marker at its centre carries its "L.H" (a heatmap itself emits no selection).
    `shown`: the head whose pattern the page shows, outlined."""
    n_layers, n_heads = grid.shape
    names = [[f"{layer}.{head}" for head in range(n_heads)] for layer in range(n_layers)]
    label = SCORE_NAMES.get(score, score)
    xs, ys = [f"H{h}" for h in range(n_heads)], [f"L{layer}" for layer in range(n_layers)]
    fig = go.Figure(go.Heatmap(z=grid, x=xs, y=ys, customdata=names, colorscale="Viridis",
                               colorbar=dict(title=dict(text=label, side="right")), hoverinfo="skip"))
    fig.add_trace(click_targets([x for _ in ys for x in xs], [y for y in ys for _ in xs],
                                [name for row in names for name in row],
                                [f"head {names[r][c]}<br>{label} {float(grid[r, c]):.3f}"
                                 for r in range(n_layers) for c in range(n_heads)]))
    if shown in {name for row in names for name in row}:
        layer, head = (int(v) for v in str(shown).split("."))
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="#d6604d", width=2.5))
    chance_text = f" · uniform causal pattern: {chance:.3f}" if chance is not None and np.isfinite(chance) else ""
    fig.update_layout(title=f"{title or label}{chance_text} (click a head to open its pattern)", hoverdistance=-1,
                      template="plotly_white", height=max(320, 90 + 16 * n_layers), clickmode="event+select",
                      xaxis=dict(side="top"), yaxis=dict(title="layer", autorange="reversed"),
                      margin=dict(l=60, r=20, t=90, b=30))
    return fig
