"""Figures of the Mamba-only view: relevance against distance from the predicted position, and the conservation
error of MambaLRP with each of its four fixes switched off in turn. Plain numbers in, plotly figures out."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from interpscope.figures.draw import log_ticks


def distance_figure(distances: np.ndarray, share: np.ndarray, signed: np.ndarray, counts: np.ndarray,
                    n_prompts: int, method_label: str) -> go.Figure:
    """Mean share of |relevance| per distance back from the predicted position (log axis, so the long tail
    shows), and the cumulative share within d tokens (right axis). `signed` rides along in the hover."""
    share = np.asarray(share, dtype=np.float64)
    cumulative = np.cumsum(share) / (share.sum() or 1.0)
    custom = np.stack([np.asarray(counts), np.asarray(signed, dtype=np.float64)], axis=-1)
    hover = ("distance %{x}<br>%{y:.4g}<br>signed R / sum |R|: %{customdata[1]:.4g}"
             "<br>prompts reaching it: %{customdata[0]}<extra></extra>")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=distances, y=np.maximum(share, 1e-12), mode="lines+markers", name="share of |R|",
                             customdata=custom, hovertemplate=hover, line=dict(color="#d62728")))
    fig.add_trace(go.Scatter(x=distances, y=cumulative, mode="lines", name="cumulative share (right axis)",
                             yaxis="y2", line=dict(color="#1f77b4", dash="dot"),
                             hovertemplate="within %{x} tokens: %{y:.1%}<extra></extra>"))
    fig.update_layout(title=f"{method_label}: relevance vs distance from the predicted position "
                            f"({n_prompts} prompts)",
                      template="plotly_white", xaxis_title="tokens back from the predicted position (0 = last)",
                      yaxis=dict(title="mean share of |R| per prompt (log)", type="log",
                                 **log_ticks(np.maximum(share, 1e-12))),
                      yaxis2=dict(title="cumulative share of |R|", overlaying="y", side="right", range=[0, 1.02],
                                  tickformat=".0%", showgrid=False),
                      height=440, legend=dict(orientation="h", y=-0.25), margin=dict(l=80, r=80, t=60, b=100))
    return fig


def fix_error_figure(labels: Sequence[str], errors: Sequence[float], title: str) -> go.Figure:
    """Bar chart (log scale) of the relative conservation error |sum R + biases - y| / |y| per setting."""
    floor = 1e-16
    values = [max(float(e), floor) for e in errors]
    colors = ["#2ca02c" if i == 0 else "#d62728" if "no fixes" in label else "#ff7f0e"
              for i, label in enumerate(labels)]
    fig = go.Figure(go.Bar(x=list(labels), y=values, marker_color=colors, text=[f"{v:.1e}" for v in values],
                           textposition="outside", hovertemplate="%{x}<br>relative error %{y:.2e}<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", height=420,
                      yaxis=dict(type="log", **log_ticks(values)),
                      xaxis_title="MambaLRP setting", yaxis_title="relative conservation error (log)",
                      margin=dict(l=70, r=20, t=60, b=80))
    return fig
