"""Figures of the feature-circuit view: the token -> upstream feature -> target graph, and where the value went."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from interpscope.components.graph_draw import add_edges, token_axis

KIND_COLOUR = {"token": "#444444", "feature": "#e6781e", "error": "#888888", "target": "black"}


def circuit_figure(nodes: Sequence, edges: Sequence, title: str) -> go.Figure:
    """Tokens along the bottom, upstream features (and the error node) in the middle above the token where each
    is most relevant, the target on top; edge width ~ |relevance|, red for, blue against. Feature points carry
    their id in customdata (a click opens the feature)."""
    tokens = [n for n in nodes if n.kind == "token"]
    width = max(len(tokens) - 1, 1)
    position = {n.id: (float(n.position), 0.0) for n in tokens}
    middle = sorted([n for n in nodes if n.kind == "feature"], key=lambda n: (n.position, n.index))
    gap = max(0.6, 0.05 * (width + 2))  # ~a label's width ("#1234") on a ~1000 px plot, in token units
    last_x = -1.0
    label_below: set[str] = set()
    for node in middle:
        x = max(float(node.position), last_x + gap)
        if x - last_x < 2 * gap and middle.index(node) % 2:  # crowded: every other label under its point
            label_below.add(node.id)
        position[node.id] = (x, 1.0)
        last_x = x
    position["error"] = (max(width + 0.8, last_x + gap), 1.0)
    position["target"] = (width / 2, 2.0)
    fig = go.Figure()
    biggest = add_edges(fig, edges, position, width=7.0)
    shown = [n for n in nodes if n.id in position]
    fig.add_trace(go.Scatter(
        x=[position[n.id][0] for n in shown], y=[position[n.id][1] for n in shown], mode="markers+text",
        text=["" if n.kind == "token" else n.label for n in shown],  # tokens: the x axis' tick labels
        textposition=["bottom center" if n.id in label_below else "top center" for n in shown],
        customdata=[n.index if n.kind == "feature" else -1 for n in shown], showlegend=False,
        marker=dict(size=[12 + 16 * min(1.0, abs(n.relevance) / biggest) for n in shown],
                    color=[KIND_COLOUR[n.kind] for n in shown]),
        hovertext=[f"{n.label}: relevance {n.relevance:+.4g}" for n in shown], hoverinfo="text"))
    ordered = sorted(tokens, key=lambda n: n.position)
    fig.update_layout(title=title, template="plotly_white", height=480, clickmode="event+select",
                      margin=dict(l=30, r=30, t=60, b=90),
                      xaxis=token_axis([n.label.split(": ", 1)[-1] for n in ordered]),
                      yaxis=dict(tickvals=[0, 1, 2], ticktext=["input tokens", "upstream SAE", "target"],
                                 range=[-0.5, 2.4]))
    return fig


# the colour of each part of the circuit readout, by the name the circuit view gives it
READOUT_COLOURS = {"input tokens": "#d6604d", "SAE error node": "#e6781e", "SAE biases": "#999999",
                   "softmax (AttnLRP)": "#4393c3", "model biases": "#bbbbbb", "rest": "#333333"}


def circuit_readout_figure(parts: Sequence[tuple[str, float]], value: float, label: str) -> go.Figure:
    """The explained value split into its parts, one stacked bar, the value marked. Parts that do not apply are left
    out by the caller (the softmax share under CP-LRP, the model's biases where it has none); each part keeps its own
    colour whichever others are present."""
    fig = go.Figure()
    for name, part in parts:
        fig.add_trace(go.Bar(x=[part], y=[""], orientation="h", name=f"{name}: {part:.3g}",
                          marker_color=READOUT_COLOURS[name],
                             hovertemplate=f"{name}: %{{x:.4g}}<extra></extra>"))
    fig.add_vline(x=value, line=dict(color="black", dash="dash"), annotation_text=f"{label}: {value:.3g}",
                  annotation_position="top")
    fig.update_layout(barmode="relative", template="plotly_white", height=230, margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", yanchor="top", y=-0.35, x=0), yaxis=dict(visible=False))
    return fig
