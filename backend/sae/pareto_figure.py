"""The Pareto figure: L0 (log axis) against loss recovered and against FVU, every SAE of the sweep as a point
(faint off the frontier), each architecture's frontier as a line. Each point's customdata is its folder name,
so a page can open the SAE a person clicks."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interpscope.sae.pareto import ParetoAnalysis

COLOURS = {"relu": "#636efa", "gated": "#ef553b", "topk": "#00cc96", "jumprelu": "#ab63fa", "batchtopk": "#ffa15a",
           "matryoshka": "#19d3f3", "transcoder": "#ff6692"}


def pareto_figure(analysis: ParetoAnalysis):
    """Two panels side by side; hover shows a point's settings and figures."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from interpscope.sae.pareto import METRICS, hover_text

    fig = make_subplots(rows=1, cols=2, subplot_titles=("L0 vs loss recovered (up-left is better)",
                                                        "L0 vs FVU (down-left is better)"))
    by_arch: dict[str, list[dict]] = {}
    for row in analysis.rows:
        by_arch.setdefault(row["architecture"], []).append(row)
    for col, metric in enumerate(METRICS, start=1):
        for arch, rows in by_arch.items():
            colour = COLOURS.get(arch, "#888888")
            on_front = set(analysis.frontiers[metric].get(arch, []))
            front = sorted((r for r in rows if r["name"] in on_front), key=lambda r: r["l0"])
            off = [r for r in rows if r["name"] not in on_front]
            label = rows[0]["label"]
            fig.add_trace(go.Scatter(
                x=[r["l0"] for r in front], y=[r[metric] for r in front], mode="lines+markers", name=label,
                legendgroup=arch, showlegend=col == 1, line={"color": colour}, marker={"size": 9},
                customdata=[r["folder"] for r in front], hovertext=[hover_text(r) for r in front],
                hoverinfo="text"), row=1, col=col)
            if off:
                fig.add_trace(go.Scatter(
                    x=[r["l0"] for r in off], y=[r[metric] for r in off], mode="markers",
                    name=f"{label} (off the frontier)", legendgroup=arch, showlegend=False,
                    marker={"color": colour, "size": 7, "opacity": 0.35, "symbol": "circle-open"},
                    customdata=[r["folder"] for r in off], hovertext=[hover_text(r) for r in off],
                    hoverinfo="text"), row=1, col=col)
        fig.update_xaxes(type="log", title_text="L0 (features active per token, log scale)", row=1, col=col)
        fig.update_yaxes(title_text=METRICS[metric][1], row=1, col=col)
    fig.update_layout(height=460, margin={"l": 50, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.2})
    return fig
