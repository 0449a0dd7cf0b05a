"""Figures of the activation-patching view: per component kind, heatmaps of the normalised effect (layers down,
positions or heads across) for real patching beside its AtP and RelP estimates; a scatter of each estimate against
real patching; the path-patching bars.

The colour scale is fixed, not fitted: 0 (no effect) is white, +1 (the clean metric fully restored) full red and
-1 full blue, values beyond shown at the end colour with the exact number on hover. So no position, an attention sink
included, ever sets the scale; excluded positions are named on the axis.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.draw import click_targets

KIND_TITLES = {"resid": "Residual stream", "attn": "Attention output", "mlp": "MLP output",
               "heads": "Attention heads (all positions)"}
METHOD_TITLES = {"real": "Activation patching", "atp": "Attribution patching (AtP)",
                 "relp": "Relevance patching (RelP)"}
METHOD_COLOURS = {"atp": "#4393c3", "relp": "#d6604d"}
SCALE = [[0.0, "#2166ac"], [0.25, "#92c5de"], [0.5, "#f7f7f7"], [0.75, "#f4a582"], [1.0, "#b2182b"]]


def method_title(result: Any, kind: str, method: str) -> str:
    """'Relevance patching (RelP), r = 0.97' (r against real patching where measured)."""
    r = result.agreement.get(kind, {}).get(method) if method != "real" else None
    return METHOD_TITLES[method] + (f", r = {r:.2f}" if r is not None else "")


def _columns(result: Any, kind: str) -> list[str]:
    """Column labels; excluded positions (a prepended BOS, measured sinks) named."""
    labels = list(result.grids[kind]["columns"])
    if kind == "heads":
        return labels
    for row in result.sinks:
        position = int(row["position"])
        if position < len(labels):
            labels[position] += " (BOS)" if row.get("prepended") else " (sink)"
    return labels


def _heatmap(result: Any, kind: str, method: str, show_scale: bool, clickable: bool = False) -> go.Heatmap:
    block = result.grids[kind]
    values = np.asarray(block[method], dtype=float)
    across = "head" if kind == "heads" else "position"
    return go.Heatmap(z=values, x=_columns(result, kind), y=list(block["rows"]), colorscale=SCALE, zmin=-1, zmax=1,
                      zmid=0, showscale=show_scale, hoverinfo="skip" if clickable else None,
                      colorbar=dict(title=dict(text="restored<br>(1 = clean)", side="right"), len=0.8),
                      hovertemplate=None if clickable else
                      f"%{{y}}, {across} %{{x}}<br>{METHOD_TITLES[method]}: %{{z:.3f}}<extra></extra>")


def _cells(result: Any, kind: str, method: str) -> go.Scatter:
    """The click targets of one heatmap: customdata [kind, method, row, column], the heatmap's hover text."""
    block = result.grids[kind]
    values = np.asarray(block[method], dtype=float)
    columns, rows = _columns(result, kind), list(block["rows"])
    across = "head" if kind == "heads" else "position"
    cells = [(r, c) for r in range(len(rows)) for c in range(len(columns))]
    return click_targets([columns[c] for _, c in cells], [rows[r] for r, _ in cells],
                         [[kind, method, r, c] for r, c in cells],
                         [f"{rows[r]}, {across} {columns[c]}<br>{METHOD_TITLES[method]}: {values[r, c]:.3f}"
                          for r, c in cells])


def kind_figure(result: Any, kind: str) -> go.Figure:
    """One component kind: a heatmap per method, side by side (real patching first). Every cell is clickable: an
    invisible marker at its centre carries [kind, method, row, column] (a heatmap itself emits no selection)."""
    methods = list(result.methods)
    fig = make_subplots(rows=1, cols=len(methods), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[method_title(result, kind, m) for m in methods])
    for i, method in enumerate(methods):
        fig.add_trace(_heatmap(result, kind, method, show_scale=i == len(methods) - 1, clickable=True),
                      row=1, col=i + 1)
        fig.add_trace(_cells(result, kind, method), row=1, col=i + 1)
    n_rows = len(result.grids[kind]["rows"])
    fig.update_yaxes(autorange="reversed", title_text="layer", row=1, col=1)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=10))
    fig.update_layout(title=f"{KIND_TITLES[kind]}: share of the clean {result.metric_label} restored by patching "
                            f"({result.model})",
                      template="plotly_white", height=max(320, 160 + 16 * n_rows), clickmode="event+select",
                      hoverdistance=-1, width=max(900, 330 * len(methods)), margin=dict(l=60, r=30, t=80, b=140))
    return fig


def heatmaps_figure(result: Any) -> go.Figure:
    """Every component kind (rows) by every method (columns), for a notebook or a single export."""
    kinds, methods = list(result.components), list(result.methods)
    short = {"real": "real patching", "atp": "AtP", "relp": "RelP"}
    titles = []
    for k in kinds:
        for m in methods:
            r = result.agreement.get(k, {}).get(m) if m != "real" else None
            titles.append(f"{KIND_TITLES[k].split(' (')[0]}: {short[m]}" + (f", r = {r:.2f}" if r is not None else ""))
    fig = make_subplots(rows=len(kinds), cols=len(methods), subplot_titles=titles, vertical_spacing=0.12,
                        horizontal_spacing=0.04)
    for r, kind in enumerate(kinds):
        for c, method in enumerate(methods):
            fig.add_trace(_heatmap(result, kind, method, show_scale=(r, c) == (0, len(methods) - 1)),
                          row=r + 1, col=c + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=9))
    fig.update_annotations(font_size=12)
    fig.update_layout(title=f"Activation patching on {result.model}: 1 = clean {result.metric_label}, 0 = corrupt",
                      template="plotly_white", height=420 * len(kinds), width=max(900, 330 * len(methods)),
                      margin=dict(l=60, r=30, t=80, b=100))
    return fig


def scatter_figure(result: Any) -> go.Figure:
    """Each approximation (y) against real patching (x), one point per changed cell, per component kind; the
    diagonal is perfect agreement."""
    kinds = list(result.components)
    approximations = [m for m in result.methods if m != "real"]
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=[
        KIND_TITLES[k].replace(" (all positions)", "") + "<br>" + ", ".join(
            f"{m} r = {result.agreement[k][m]:.2f}" for m in approximations
            if result.agreement.get(k, {}).get(m) is not None) for k in kinds])
    if "real" not in result.methods or not approximations:
        fig.update_layout(title="Run real patching and an approximation to compare them", height=300)
        return fig
    for c, kind in enumerate(kinds):
        block = result.grids[kind]
        mask = np.asarray(block["changed"], dtype=bool)
        real = np.asarray(block["real"], dtype=float)[mask]
        for method in approximations:
            estimate = np.asarray(block[method], dtype=float)[mask]
            fig.add_trace(go.Scatter(x=real, y=estimate, mode="markers", name=METHOD_TITLES[method],
                                     marker=dict(color=METHOD_COLOURS[method], size=6, opacity=0.7),
                                     legendgroup=method, showlegend=c == 0,
                                     hovertemplate=f"real %{{x:.3f}}<br>{method} %{{y:.3f}}<extra></extra>"),
                          row=1, col=c + 1)
        if real.size:
            low, high = float(min(real.min(), 0.0)), float(max(real.max(), 1.0))
            fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", line=dict(color="#888", dash="dot"),
                                     name="estimate = real", showlegend=c == 0, hoverinfo="skip"), row=1, col=c + 1)
        fig.update_xaxes(title_text="real patching", row=1, col=c + 1)
    fig.update_yaxes(title_text="estimate", row=1, col=1)
    fig.update_layout(title=dict(text="Estimates against real patching (cells the patch changes)", y=0.97),
                      template="plotly_white",
                      height=440, width=max(900, 300 * len(kinds)), margin=dict(l=60, r=20, t=120, b=60),
                      legend=dict(orientation="h", y=-0.2, x=0))
    return fig


def path_figure(result: Any) -> go.Figure:
    """The path's effect beside the sender's total effect (normalised; 1 = clean, dotted)."""
    fig = go.Figure(go.Bar(x=[f"path {result.sender} → {result.receiver}", f"{result.sender} patched everywhere"],
                           y=[result.path_effect, result.total_effect], marker_color=["#d6604d", "#888888"],
                           text=[f"{result.path_effect:.3f}", f"{result.total_effect:.3f}"], textposition="auto"))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="clean")
    fig.add_hline(y=0.0, line_color="#444")
    fig.update_layout(title=f"Path patching on {result.model}: share of the clean {result.metric_label} restored",
                      template="plotly_white", height=360, yaxis_title="restored (1 = clean, 0 = corrupt)",
                      margin=dict(l=60, r=20, t=60, b=60))
    return fig
