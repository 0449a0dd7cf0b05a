"""Figures of the information-flow view: logit lens, per-layer contributions, the token -> component -> prediction
graph (each node carries its id in customdata, so a click on it can open the head or the neuron behind it)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.draw import add_edges, log_ticks, spread_row, token_axis

RED, BLUE, GREY = "#d6604d", "#4393c3", "#888888"


def rank_text(rank: int) -> str:
    """A rank tick: 1, 10, 100, 1k, 10k, 100k, 1M."""
    for size, suffix in ((10 ** 6, "M"), (10 ** 3, "k")):
        if rank >= size:
            return f"{rank // size:,}{suffix}"
    return str(rank)


def lens_figure(layers: Sequence[str], probability: np.ndarray, rank: np.ndarray, label: str) -> go.Figure:
    """The target's probability (left axis) and rank (right axis, log) after the embeddings and each block."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=list(layers), y=probability, name="probability", mode="lines+markers",
                             line=dict(color=RED)), secondary_y=False)
    fig.add_trace(go.Scatter(x=list(layers), y=[int(r) for r in rank], name="rank", mode="lines+markers",
                             line=dict(color=GREY, dash="dot"), hovertemplate="%{x}: rank %{y:,d}<extra></extra>"),
                  secondary_y=True)
    fig.update_yaxes(title_text="probability", range=[0, max(1e-3, float(np.max(probability)) * 1.08)],
                     secondary_y=False)
    top = max(1, int(np.max(rank)) if len(rank) else 1)
    ticks = [10 ** k for k in range(0, len(str(top)) + 1) if 10 ** k <= max(10, top * 10)]
    fig.update_yaxes(title_text="rank (1 = top)", type="log", autorange="reversed", secondary_y=True,
                     tickvals=ticks, ticktext=[rank_text(t) for t in ticks])
    fig.update_layout(title=f"Logit lens: {label} after each block", template="plotly_white", height=360,
                      margin=dict(l=60, r=60, t=60, b=60), legend=dict(orientation="h", y=1.12, x=0),
                      xaxis=dict(tickangle=-45))
    return fig


def contributions_figure(attn: np.ndarray, mlp: np.ndarray, embed: float, value_label: str) -> go.Figure:
    """Each layer's attention and MLP direct contribution to the explained value (grouped bars)."""
    layers = [f"{layer}" for layer in range(len(attn))]
    fig = go.Figure([go.Bar(x=layers, y=attn, name="attention", marker_color=BLUE),
                     go.Bar(x=layers, y=mlp, name="MLP", marker_color=RED)])
    fig.update_layout(title=f"Direct contribution of each layer (embeddings {embed:+.3g})",
                      barmode="group", template="plotly_white", height=340, xaxis_title="layer",
                      yaxis_title="direct contribution", margin=dict(l=60, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=1.12, x=0))
    return fig


def graph_figure(nodes: Sequence, edges: Sequence, n_layers: int, title: str) -> go.Figure:
    """Tokens along the bottom, components at their layer's height (heads left to right, the MLP at the right
    end), the prediction on top; edge width ~ |relevance|, red for, blue against."""
    tokens = [n for n in nodes if n.kind == "token"]
    width = max(len(tokens), 1)
    position: dict[str, tuple[float, float]] = {}
    for node in tokens:
        position[node.id] = (float(node.position), 0.0)
    reads: dict[str, list[tuple[float, float]]] = {}
    for edge in edges:
        if edge.source.startswith("t") and edge.source in position:
            reads.setdefault(edge.target, []).append((position[edge.source][0], abs(edge.relevance)))
    by_layer: dict[int, list] = {}
    for node in nodes:
        if node.kind in ("head", "mlp"):
            by_layer.setdefault(node.layer, []).append(node)
    below: set[str] = set()
    for layer, members in by_layer.items():
        # above the tokens it reads from (relevance-weighted mean position), spread so the labels fit
        wanted = []
        for node in members:
            pairs = reads.get(node.id, [])
            total = sum(w for _, w in pairs)
            wanted.append((sum(p * w for p, w in pairs) / total if total else (width - 1) / 2, node.label))
        xs, under = spread_row(wanted, float(width), alternate=False)  # rows are close: all labels above
        for k, (x, node) in enumerate(zip(xs, members, strict=True)):
            position[node.id] = (x, float(layer + 1))
            if k in under:
                below.add(node.id)
    position["out"] = ((width - 1) / 2, n_layers + 1.8)  # clear of the last layer's labels
    fig = go.Figure()
    biggest = add_edges(fig, edges, position)
    shown = [n for n in nodes if n.id in position]
    colours = {"token": "#444444", "head": BLUE, "mlp": RED, "prediction": "black"}
    fig.add_trace(go.Scatter(
        x=[position[n.id][0] for n in shown], y=[position[n.id][1] for n in shown], mode="markers+text",
        text=[n.label if n.kind != "token" else "" for n in shown],  # tokens: the x axis' tick labels
        textposition=["bottom center" if n.id in below else "top center" for n in shown],
        customdata=[n.id for n in shown], showlegend=False,
        # a click selects one node: plotly would fade every other node and label to near white
        unselected=dict(marker=dict(opacity=1.0), textfont=dict(color="#444444")),
        marker=dict(size=[10 + 14 * min(1.0, abs(n.relevance) / biggest) for n in shown],
                    color=[colours[n.kind] for n in shown], symbol=["square" if n.kind == "mlp" else "circle"
                                                                    for n in shown]),
        hovertext=[f"{n.label}: relevance {n.relevance:+.4g}" for n in shown], hoverinfo="text"))
    ordered = sorted(tokens, key=lambda n: n.position)
    fig.update_layout(title=title, template="plotly_white", height=240 + 40 * n_layers,
                      margin=dict(l=40, r=20, t=60, b=90), clickmode="event+select",
                      xaxis=token_axis([n.label.split(": ", 1)[-1] for n in ordered]),
                      yaxis=dict(title="layer (0 = tokens)", zeroline=False, range=[-0.6, n_layers + 2.6]))
    return fig


def kl_figure(steps: Sequence[str], kl_logit: np.ndarray, kl_tuned: np.ndarray, heldout_logit: Sequence[float] = (),
              heldout_tuned: Sequence[float] = ()) -> go.Figure:
    """Per-step KL(final || lens) in nats, log scale (the last step is 0: the lens is the model's output there)."""
    x = list(steps)
    shown = slice(0, len(x) - 1)  # the last step's KL is 0 by construction: off a log axis
    fig = go.Figure([
        go.Scatter(x=x[shown], y=np.asarray(kl_logit)[shown], name="logit lens (this text)", mode="lines+markers",
                   line=dict(color=BLUE)),
        go.Scatter(x=x[shown], y=np.asarray(kl_tuned)[shown], name="tuned lens (this text)", mode="lines+markers",
                   line=dict(color=RED))])
    if len(heldout_logit) == len(x) and len(heldout_tuned) == len(x):
        fig.add_trace(go.Scatter(x=x[shown], y=list(heldout_logit)[shown], name="logit lens (held-out corpus)",
                                 mode="lines", line=dict(color=BLUE, dash="dot")))
        fig.add_trace(go.Scatter(x=x[shown], y=list(heldout_tuned)[shown], name="tuned lens (held-out corpus)",
                                 mode="lines", line=dict(color=RED, dash="dot")))
    fig.update_layout(title="KL from the final distribution, per layer (lower: closer to the model's prediction)",
                      template="plotly_white", height=360,
                      yaxis=dict(title="KL (nats)", type="log", **log_ticks(
                          [*list(kl_logit)[shown], *list(kl_tuned)[shown], *list(heldout_logit)[shown],
                           *list(heldout_tuned)[shown]])),
                      xaxis=dict(title="read after", tickangle=-45), margin=dict(l=60, r=20, t=60, b=80),
                      legend=dict(orientation="h", y=1.1, x=0))
    return fig
