"""Figures of the relevance page: latent relevance, perturbation curves, ABPC, continuation matrix."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from interpscope.figures.tokens import COLORSCALE

PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _label(token: str) -> str:
    return repr(token)[1:-1].replace(" ", "␣") or "∅"


def _unique(labels: Sequence[str]) -> list[str]:
    """Plotly merges equal category labels: number the tokens."""
    return [f"{i}:{label}" for i, label in enumerate(labels)]


def signed_matrix(z: np.ndarray, x: Sequence[str], y: Sequence[str], title: str, x_title: str, y_title: str,
                  hover: str) -> go.Figure:
    """A signed heatmap (blue-white-red, centred at zero) with labelled axes and a colorbar."""
    limit = float(np.max(np.abs(z))) if z.size else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=list(x), y=list(y), colorscale=COLORSCALE, zmid=0, zmin=-limit, zmax=limit,
                               colorbar=dict(title=dict(text="relevance", side="right")),
                               hovertemplate=hover + "<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", xaxis_title=x_title, yaxis_title=y_title,
                      height=max(320, 120 + 18 * len(y)), margin=dict(l=60, r=20, t=60, b=80))
    return fig


def latent_figure(tokens: Sequence[str], residual: np.ndarray, title: str) -> go.Figure:
    """Layers x tokens relevance of the residual stream (row l = input of block l; last row = final output)."""
    layers = [f"block {layer} in" for layer in range(residual.shape[0] - 1)] + ["final"]
    return signed_matrix(residual, _unique([_label(t) for t in tokens]), layers, title, "token", "residual stream",
                         "%{y}, token %{x}<br>R = %{z:.4f}")


def continuation_figure(generated: Sequence[str], sequence: Sequence[str], matrix: np.ndarray, title: str) -> go.Figure:
    """Output-token x sequence-token relevance of an explained continuation."""
    return signed_matrix(matrix, _unique([_label(t) for t in sequence]), _unique([_label(t) for t in generated]),
                         title, "sequence token", "generated token", "%{y} ← %{x}<br>R = %{z:.4f}")


# one method's perturbation curves: fractions removed, MoRF, LeRF (arrays or lists of floats) and its ABPC
Curves = tuple[np.ndarray | Sequence[float], np.ndarray | Sequence[float], np.ndarray | Sequence[float], float]


def curves_figure(curves: Mapping[str, Curves], title: str) -> go.Figure:
    """MoRF (solid) and LeRF (dashed) curves per method; the legend carries each ABPC."""
    fig = go.Figure()
    for index, (label, (fractions, morf, lerf, abpc)) in enumerate(curves.items()):
        colour = PALETTE[index % len(PALETTE)]
        fig.add_trace(go.Scatter(x=fractions, y=morf, mode="lines+markers", name=f"{label} MoRF (ABPC {abpc:.2f})",
                                 line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=fractions, y=lerf, mode="lines+markers", name=f"{label} LeRF",
                                 line=dict(color=colour, dash="dash")))
    fig.update_layout(title=title, template="plotly_white", xaxis_title="fraction of tokens removed",
                      yaxis_title="target logit", height=460, margin=dict(l=60, r=20, t=60, b=60))
    return fig


def curve_rows(curves: Mapping[str, Curves]) -> list[dict]:
    """The perturbation curves as a tidy table: one row per (method, fraction removed), with the method's ABPC."""
    return [{"method": name, "fraction_removed": float(f), "morf": float(m), "lerf": float(le), "abpc": float(abpc)}
            for name, (fractions, morf, lerf, abpc) in curves.items()
            for f, m, le in zip(fractions, morf, lerf, strict=True)]


def abpc_bar(labels: Sequence[str], means: Sequence[float], stds: Sequence[float], title: str) -> go.Figure:
    """Mean ABPC per method with one standard deviation."""
    fig = go.Figure(go.Bar(x=list(labels), y=list(means), error_y=dict(type="data", array=list(stds)),
                           marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))],
                           hovertemplate="%{x}<br>mean ABPC %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", xaxis_title="method",
                      yaxis_title="ABPC = AUC(LeRF) - AUC(MoRF) (logit)", height=420,
                      margin=dict(l=60, r=20, t=60, b=60))
    return fig


def top_bar(labels: Sequence[str], values: Sequence[float], title: str, x_title: str) -> go.Figure:
    """Horizontal signed bars (largest |R| on top) for top heads / neurons."""
    colours = ["#d62728" if v >= 0 else "#1f77b4" for v in values]
    fig = go.Figure(go.Bar(x=list(values)[::-1], y=list(labels)[::-1], orientation="h",
                           marker_color=colours[::-1], hovertemplate="%{y}<br>R = %{x:.4f}<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", xaxis_title="relevance", yaxis_title=x_title,
                      height=80 + 28 * len(labels), margin=dict(l=80, r=20, t=50, b=50))
    return fig


def mean_relevance_bars(labels: Sequence[str], means: Sequence[float], counts: Sequence[int], title: str,
                        x_title: str, by_value: bool = False) -> go.Figure:
    """Signed bars of mean relevance (red for, blue against), each with its count in the hover. by_value: the bars
    in order of their mean (largest first), so the order and the values shown agree; else in the given order (e.g.
    distance)."""
    rows = list(zip(labels, means, counts, strict=True))
    if by_value:
        rows.sort(key=lambda row: -row[1])
    shown_labels, shown_means, shown_counts = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    fig = go.Figure(go.Bar(x=_unique([_label(t) for t in shown_labels]) if x_title.startswith("token")
                           else shown_labels, y=shown_means, customdata=shown_counts,
                           marker_color=[PALETTE[0] if m >= 0 else PALETTE[1] for m in shown_means],
                           hovertemplate="%{x}: mean %{y:.4g} over %{customdata} tokens<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", height=380, xaxis_title=x_title,
                      yaxis_title="mean relevance", margin=dict(l=60, r=20, t=60, b=110), xaxis=dict(tickangle=-45))
    return fig
