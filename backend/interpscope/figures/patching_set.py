"""The figure of patching over a set of pairs (interpscope.patching.dataset): per component kind (rows) and method
(columns), the mean grid over the pairs on the single-pair view's fixed scale (0 white, +1 red, -1 blue: no cell, an
attention sink included, sets it), each cell's hover giving mean, sd over the pairs and how many pairs the patch
changes there; excluded positions are named on the axis."""
from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.patching import KIND_TITLES, METHOD_TITLES, SCALE

SHORT = {"real": "real patching", "atp": "AtP", "relp": "RelP"}


def _columns(result: Any, kind: str) -> list[str]:
    if kind == "heads":
        return list(result.grids[kind]["columns"])
    labels = [result.column_label(c) for c in range(len(result.grids[kind]["columns"]))]
    for position in result.excluded:
        if position < len(labels):
            labels[position] += " (excluded)"
    return labels


def set_figure(result: Any) -> go.Figure:
    kinds, methods = list(result.components), list(result.methods)
    titles = []
    for kind in kinds:
        for method in methods:
            entry = result.agreement.get(kind, {}).get(method) if method != "real" else None
            r = entry.get("mean_grid_r") if entry else None
            titles.append(f"{KIND_TITLES[kind].split(' (')[0]}: {SHORT[method]}"
                          + (f", mean-grid r = {r:.2f}" if r is not None else ""))
    fig = make_subplots(rows=len(kinds), cols=len(methods), subplot_titles=titles, vertical_spacing=0.12,
                        horizontal_spacing=0.04)
    for r, kind in enumerate(kinds):
        block = result.grids[kind]
        across = "head" if kind == "heads" else "position"
        changed = np.asarray(block["changed_in"])
        for c, method in enumerate(methods):
            mean, sd = result.mean(kind, method), result.std(kind, method)
            custom = np.stack([sd, changed], axis=-1)
            fig.add_trace(go.Heatmap(
                z=mean, x=_columns(result, kind), y=list(block["rows"]), customdata=custom, colorscale=SCALE,
                zmin=-1, zmax=1, zmid=0, showscale=(r, c) == (0, len(methods) - 1),
                colorbar=dict(title=dict(text=f"mean over<br>{result.n_pairs} pairs", side="right"), len=0.8),
                hovertemplate=(f"%{{y}}, {across} %{{x}}<br>{METHOD_TITLES[method]}: mean %{{z:.3f}}, sd "
                               f"%{{customdata[0]:.3f}}<br>changed in %{{customdata[1]}} of {result.n_pairs} pairs"
                               "<extra></extra>")), row=r + 1, col=c + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=9))
    fig.update_annotations(font_size=12)
    fig.update_layout(title=f"Patching over {result.n_pairs} pairs on {result.model}: mean of 1 = clean "
                            f"{result.metric_label}, 0 = corrupt (sd over pairs on hover)",
                      template="plotly_white", height=420 * len(kinds), width=max(900, 380 * len(methods)),
                      margin=dict(l=60, r=30, t=80, b=100))
    return fig
