"""The held-out faithfulness table as a figure: mean ABPC per method with its bootstrap 95% interval, one group of
bars per deletion baseline, the random-order control drawn like the methods so every bar stands beside chance."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from interpscope.figures.relevance import PALETTE


def abpc_interval_figure(table: Sequence[Mapping], title: str) -> go.Figure:
    """Rows of interpscope.relevance.heldout's table (one subset): x = baseline, one bar per method, error bars from
    the interval's ends."""
    methods = list(dict.fromkeys(r["method"] for r in table))
    fig = go.Figure()
    for i, method in enumerate(methods):
        rows = [r for r in table if r["method"] == method]
        fig.add_bar(x=[r["baseline"] for r in rows], y=[r["mean_abpc"] for r in rows], name=rows[0]["label"],
                    marker_color="#9e9e9e" if method == "random" else PALETTE[i % len(PALETTE)],
                    error_y=dict(type="data", symmetric=False,
                                 array=[r["ci_high"] - r["mean_abpc"] for r in rows],
                                 arrayminus=[r["mean_abpc"] - r["ci_low"] for r in rows]),
                    customdata=[[r["ci_low"], r["ci_high"], r["n"]] for r in rows],
                    hovertemplate="%{fullData.name}, %{x} baseline<br>mean ABPC %{y:.3f} "
                                  "[%{customdata[0]:.3f}, %{customdata[1]:.3f}]<br>%{customdata[2]} prompts"
                                  "<extra></extra>")
    fig.update_layout(title=title, template="plotly_white", barmode="group", xaxis_title="deletion baseline",
                      yaxis_title="mean ABPC (95% interval)", height=380, margin=dict(l=50, r=20, t=50, b=40))
    return fig
