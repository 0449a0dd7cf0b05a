"""The synthetic ground-truth figure (interpscope.sae.synth_run): each SAE's MCC against the true dictionary by its
L0, beside the true L0 (vertical line), the true dictionary's MCC (1) and a random dictionary's (chance)."""
from __future__ import annotations

from typing import Any


def synth_figure(result: Any):
    import plotly.graph_objects as go

    from interpscope.figures.draw import log_ticks
    from interpscope.figures.palette import ARCHITECTURE_COLOURS as COLOURS

    fig = go.Figure()
    by_arch: dict[str, list[dict]] = {}
    for row in result.rows:
        by_arch.setdefault(row["architecture"], []).append(row)
    for arch, rows in by_arch.items():
        rows = sorted(rows, key=lambda r: r["l0"])
        fig.add_trace(go.Scatter(
            x=[r["l0"] for r in rows], y=[r["mcc"] for r in rows], mode="lines+markers", name=rows[0]["label"],
            line={"color": COLOURS.get(arch, "#888888")}, marker={"size": 9},
            hovertext=[f"{r['name']}<br>L0 {r['l0']:.2f}, FVU {r['fvu']:.3f}<br>MCC {r['mcc']:.3f}, recovery "
                       f"{r['recovery']:.2f}" for r in rows], hoverinfo="text"))
    fig.add_hline(y=result.reference["mcc"], line={"dash": "dot", "color": "#444"},
                  annotation_text="true dictionary", annotation_position="bottom right")
    fig.add_hline(y=result.chance["mcc"], line={"dash": "dot", "color": "#999"},
                  annotation_text="random dictionary (chance)", annotation_position="top right")
    fig.add_vline(x=result.reference["l0"], line={"dash": "dash", "color": "#444"},
                  annotation_text=f"true L0 {result.reference['l0']:.1f}", annotation_position="top left")
    import math

    l0s = [r["l0"] for r in result.rows if r["l0"] > 0] + [result.reference["l0"]]
    fig.update_xaxes(type="log", title_text="L0 (features active per row, log scale)", **log_ticks(l0s),
                     range=[math.log10(min(l0s) / 1.5), math.log10(max(l0s) * 1.5)])
    fig.update_yaxes(title_text="MCC with the true dictionary", range=[0, 1.05])
    fig.update_layout(height=420, margin={"l": 50, "r": 20, "t": 30, "b": 50}, legend={"orientation": "h", "y": -0.25})
    return fig
