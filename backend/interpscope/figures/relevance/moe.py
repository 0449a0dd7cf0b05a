"""Figures of per-expert relevance (interpscope.relevance.experts): which expert carried how much, per token and layer.

Excluded positions (measured sinks, a prepended BOS) never set the colour scale: their columns are blank in the
heatmap and named in the tick label, as in the token heatmap. An expert the router did not choose for a token is
blank too (it carried nothing: not a measured 0).
"""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.tokens import COLORSCALE


def _tick(index: int, token: str, excluded: Sequence[int], reasons: Mapping[int, str]) -> str:
    """A column's label, escaped (plotly reads '<|endoftext|>' as markup and drops it)."""
    label = f"{index}:{token!r}"
    return html.escape(f"{label} ({reasons.get(index, 'excluded')})" if index in excluded else label, quote=False)


def expert_heatmaps(tokens: Sequence[str], layers: Sequence[int], relevance: np.ndarray, excluded: Sequence[int],
                    reasons: Mapping[int, str], title: str) -> go.Figure:
    """One experts x tokens heatmap per sparse layer, relevance [n_layers, T, n_experts] (NaN: not chosen), one
    symmetric colour scale over every layer from the non-excluded tokens."""
    values = np.asarray(relevance, dtype=float)
    shown = values.copy()
    shown[:, [p for p in excluded if p < values.shape[1]]] = np.nan
    finite = shown[np.isfinite(shown)]
    scale = float(np.max(np.abs(finite))) if finite.size else 1.0
    ticks = [_tick(i, t, excluded, reasons) for i, t in enumerate(tokens)]
    fig = make_subplots(rows=len(layers), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"layer {layer}" for layer in layers])
    for row, layer in enumerate(layers):
        z = shown[row].T  # experts x tokens
        hover = [[f"layer {layer}, expert {e}, {ticks[t]}: R = {values[row, t, e]:+.4g}"
                  if np.isfinite(values[row, t, e]) else f"layer {layer}, expert {e}, {ticks[t]}: not chosen"
                  for t in range(values.shape[1])] for e in range(values.shape[2])]
        fig.add_trace(go.Heatmap(z=z, x=list(range(len(tokens))), y=[f"E{e}" for e in range(values.shape[2])],
                                 zmin=-scale, zmax=scale, colorscale=COLORSCALE, hoverinfo="text", text=hover,
                                 showscale=row == 0, colorbar=dict(title="R")), row=row + 1, col=1)
    fig.update_xaxes(range=[-0.5, len(tokens) - 0.5])  # an excluded (all-blank) column keeps its place and name
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(tokens))), ticktext=ticks, tickangle=-45,
                     automargin=True, row=len(layers), col=1)
    fig.update_layout(title=title, height=140 + 150 * len(layers), margin=dict(l=160, r=20, t=70, b=120))
    return fig


def share_figure(layers: Sequence[int], relevance_share: np.ndarray, routing_share: np.ndarray,
                 title: str) -> go.Figure:
    """Each expert's share of a layer's relevance beside its share of the router's weight (the control)."""
    n_experts = relevance_share.shape[1]
    labels = [f"L{layer} E{e}" for layer in layers for e in range(n_experts)]
    fig = go.Figure([
        go.Bar(name="share of relevance", x=labels, y=np.asarray(relevance_share).ravel(), marker_color="#d62728"),
        go.Bar(name="share of router weight (control)", x=labels, y=np.asarray(routing_share).ravel(),
               marker_color="#999999"),
    ])
    fig.update_layout(title=title, barmode="group", yaxis=dict(title="share", tickformat=".0%"), height=360,
                      margin=dict(l=50, r=20, t=60, b=80))
    return fig
