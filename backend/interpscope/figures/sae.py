"""Figures of the SAE views: histograms, density, logit weights, the prompt heatmap, steering (plain data in)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.draw import add_edges, log_ticks, token_axis

CURVES = (("loss", "loss"), ("l0", "L0"), ("fvu", "FVU (batch)"))
ORANGE = (230, 120, 20)
ACTIVATION_SCALE = [[0.0, "rgb(255,255,255)"], [1.0, f"rgb{ORANGE}"]]


def histogram_figure(edges: Sequence[float] | np.ndarray, counts: Sequence[int] | np.ndarray, title: str,
                     x_title: str, y_log: bool = False, color: str = "rgb(230,120,20)") -> go.Figure:
    """Bar histogram from {edges, counts}."""
    edge_array = np.asarray(edges, float)
    centres = (edge_array[:-1] + edge_array[1:]) / 2 if edge_array.size > 1 else edge_array
    bar = go.Bar(x=centres.tolist(), y=list(counts),
                 width=np.diff(edge_array).tolist() if edge_array.size > 1 else None,
                 marker=dict(color=color), hovertemplate="%{x:.4g}: %{y}<extra></extra>")
    return go.Figure(data=[bar], layout=dict(
        title=dict(text=title), xaxis=dict(title=dict(text=x_title)),
        yaxis=dict(title=dict(text="count"), type="log" if y_log else "linear"), height=300, bargap=0.02,
        margin=dict(l=50, r=20, t=50, b=50)))


def density_figure(density: np.ndarray, bins: int = 40) -> go.Figure:
    """log10 feature density across all features that fired (dead features are counted apart)."""
    alive = density[density > 0]
    low = math.floor(np.log10(alive.min())) if alive.size else -6
    edges = np.linspace(low, 0.0, bins + 1)
    counts = np.histogram(np.log10(alive), bins=edges)[0] if alive.size else np.zeros(bins, int)
    return histogram_figure(edges, counts, f"Feature density ({alive.size} of {density.size} features fired)",
                            "log10 density (fraction of tokens where the feature is > 0)", color="rgb(60,110,180)")


def logits_figure(top: Sequence, bottom: Sequence, title: str) -> go.Figure:
    """Top (promoted) and bottom (suppressed) logit-weight tokens (TokenWeight rows) as horizontal bars."""
    rows = list(reversed(list(top))) + list(bottom)
    tokens = [repr(r.token) for r in rows]
    weights = [r.weight for r in rows]
    bar = go.Bar(x=weights, y=list(range(len(rows))), orientation="h",
                 marker=dict(color=["rgb(214,39,40)" if w < 0 else "rgb(44,160,44)" for w in weights]),
                 hovertext=tokens, hovertemplate="%{hovertext}: %{x:.4f}<extra></extra>")
    return go.Figure(data=[bar], layout=dict(
        title=dict(text=title), xaxis=dict(title=dict(text="logit weight (W_dec[i] · diag(γ) · W_U)")),
        yaxis=dict(tickvals=list(range(len(rows))), ticktext=tokens, autorange="reversed"), height=520,
        margin=dict(l=120, r=20, t=50, b=50)))


def prompt_heatmap_figure(tokens: Sequence[str], features: Sequence[int], values: np.ndarray, title: str,
                          sinks: Sequence[int] = (), reasons: Mapping[int, str] | None = None) -> go.Figure:
    """Tokens (x) x top features (y) heatmap of activations, colorbar = activation.

    Excluded columns (`sinks`: measured massive activations, a prepended BOS) are blanked: an SAE is undefined there
    and their values can be orders of magnitude larger; the colour scale ends at the largest activation elsewhere,
    and the x-axis and the hover name each one with its reason (`reasons`: position -> why)."""
    reasons = reasons or {}
    why = {i: reasons.get(i, "excluded") for i in sinks}
    labels = [f"{i}: {t!r}" + (f" ({why[i]})" if i in why else "") for i, t in enumerate(tokens)]
    values = np.asarray(values, float).copy()
    values[[i for i in sinks if i < values.shape[0]]] = np.nan
    finite = values[np.isfinite(values)]
    zmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    fig = go.Figure(go.Heatmap(z=values.T, x=list(range(len(tokens))), y=[f"#{f}" for f in features],
                               zmin=0.0, zmax=zmax, colorscale=ACTIVATION_SCALE, hoverongaps=False,
                               colorbar=dict(title="activation"),
                               customdata=[[lab for lab in labels] for _ in features],
                               hovertemplate="%{customdata} · feature %{y}: %{z:.4g}<extra></extra>"))
    step = max(1, len(tokens) // 40)
    fig.update_xaxes(tickvals=list(range(0, len(tokens), step)),
                     ticktext=[tokens[i].replace("\n", "↵")[:10] for i in range(0, len(tokens), step)],
                     tickangle=-60, title="token (blank, not ranked: " + "; ".join(
                         f"{i} {tokens[i]!r}, {why[i]}" for i in sorted(why) if i < len(tokens)) + ")"
                     if why else "token")
    fig.update_yaxes(title="feature", autorange="reversed", type="category")
    fig.update_layout(title=title, height=max(320, 60 + 22 * len(features)), margin=dict(l=70, r=20, t=50, b=90))
    return fig


def steering_figure(clean_top: Sequence[dict], edited_top: Sequence[dict], title: str) -> go.Figure:
    """Next-token probabilities of the clean and the edited run (union of both top lists)."""
    order = []
    for row in list(clean_top) + list(edited_top):
        if row["token"] not in order:
            order.append(row["token"])
    clean = {r["token"]: r["prob"] for r in clean_top}
    edited = {r["token"]: r["prob"] for r in edited_top}
    labels = [repr(t) for t in order]
    fig = go.Figure([go.Bar(name="clean", x=labels, y=[clean.get(t) for t in order], marker_color="rgb(120,120,120)"),
                     go.Bar(name="edited", x=labels, y=[edited.get(t) for t in order],
                            marker_color="rgb(230,120,20)")])
    fig.update_layout(title=title, barmode="group", xaxis_title="next token (top 10 of either run; blank = not in "
                      "that run's top 10)", yaxis_title="probability", height=360, margin=dict(l=50, r=20, t=50, b=90))
    return fig


def logprob_change_figure(tokens: Sequence[str], change: Sequence[float], title: str) -> go.Figure:
    """Change of log p(actual next token) at each position, edited minus clean."""
    labels = [f"{i}: {t!r}" for i, t in enumerate(tokens[1:], start=1)]
    change = list(change)
    fig = go.Figure(go.Bar(x=list(range(1, len(change) + 1)), y=change, hovertext=labels,
                           marker_color=["rgb(214,39,40)" if c < 0 else "rgb(44,160,44)" for c in change],
                           hovertemplate="predicting %{hovertext}: %{y:+.4f}<extra></extra>"))
    step = max(1, len(change) // 40)
    fig.update_xaxes(tickvals=list(range(1, len(change) + 1, step)),
                     ticktext=[tokens[i].replace("\n", "↵")[:10] for i in range(1, len(change) + 1, step)],
                     tickangle=-60, title="token being predicted")
    fig.update_layout(title=title, yaxis_title="Δ log p (edited − clean)", height=320,
                      margin=dict(l=60, r=20, t=50, b=90))
    return fig


def evaluation_density_figure(counts: np.ndarray, edges: np.ndarray, dense_threshold: float, n_tokens: int,
                              dead: int) -> go.Figure:
    """log10 density of the features that fired in an evaluation, the dense threshold marked."""
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=centres, y=counts, width=np.diff(edges), marker_color="#4c78a8", name="features",
                           hovertemplate="log10 density %{x:.2f}<br>%{y} features<extra></extra>"))
    fig.add_vline(x=np.log10(dense_threshold), line_dash="dash", line_color="#e45756",
                  annotation_text=f"dense > {dense_threshold:g}", annotation_position="top left")
    fig.update_layout(title=f"Feature density over {n_tokens:,} tokens ({dead:,} features did not fire on them)",
                      xaxis_title="log10(fraction of tokens on which the feature fires)",
                      yaxis_title="number of features", bargap=0.05, height=380, margin=dict(t=60, b=50))
    return fig


def training_curves_figure(histories: dict[str, list[dict]]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in CURVES], horizontal_spacing=0.08)
    palette = ["#4c78a8", "#e45756", "#54a24b", "#b279a2", "#f58518"]
    for i, (name, history) in enumerate(histories.items()):
        tokens = [h["tokens"] for h in history]
        for col, (key, _) in enumerate(CURVES, start=1):
            fig.add_trace(go.Scatter(x=tokens, y=[h[key] for h in history], mode="lines", name=name,
                                     legendgroup=name, showlegend=col == 1,
                                     line=dict(color=palette[i % len(palette)])), row=1, col=col)
            fig.update_xaxes(title_text="training tokens", row=1, col=col)
    fig.update_yaxes(type="log", row=1, col=1, **log_ticks(h["loss"] for history in histories.values()
                                                            for h in history))
    fig.update_layout(height=360, title="Training curves", margin=dict(t=70, b=50), legend=dict(orientation="h",
                      y=-0.25))
    return fig


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
        unselected=dict(marker=dict(opacity=1.0), textfont=dict(color="#444444")),  # a click fades nothing
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
