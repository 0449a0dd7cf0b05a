"""Plotly figures of the Entropy neurons page, built from plain arrays and result dataclasses (no models)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.draw import log_ticks

CHOSEN = "#d62728"
RANDOM = "#7f7f7f"
TEMPLATE = "plotly_white"


def candidates_scatter(norm: np.ndarray, logit_var: np.ndarray, rho: np.ndarray, layer: int, k: int,
                       highlight: Sequence[int] = (), model: str = "") -> go.Figure:
    """||write|| (what each neuron writes into the residual, folded) vs LogitVar (log y) of every neuron of a layer,
    coloured by rho; chosen neurons circled and named in labels drawn over the points (annotations: a text trace lies
    under the WebGL points), each point carrying its "layer.index" in customdata (a click inspects it)."""
    labels = [f"{layer}.{i}" for i in range(len(norm))]
    floor = max(float(np.min(logit_var[logit_var > 0])) if np.any(logit_var > 0) else 1e-12, 1e-14)
    shown_var = np.maximum(logit_var, floor)
    fig = go.Figure(go.Scattergl(
        x=norm, y=shown_var, mode="markers", text=labels, name="neurons", customdata=labels,
        unselected=dict(marker=dict(opacity=1.0)),  # a click selects one neuron: the others stay as drawn
        marker=dict(color=rho, colorscale="Viridis", size=6, cmin=0, cmax=max(1e-6, float(rho.max())),
                    colorbar=dict(title=dict(text=f"rho (k={k})"))),
        hovertemplate="neuron %{text}<br>norm %{x:.3f}<br>LogitVar %{y:.2e}<br>rho %{marker.color:.3f}<extra></extra>"))
    if len(highlight):
        idx = np.asarray(list(highlight), dtype=int)
        fig.add_trace(go.Scatter(
            x=norm[idx], y=shown_var[idx], mode="markers", name="chosen",
            marker=dict(size=14, color="rgba(0,0,0,0)", line=dict(color=CHOSEN, width=2)), hoverinfo="skip"))
        for k, i in enumerate(idx):  # above the WebGL layer, on a white box, clear of the point (alternating sides)
            fig.add_annotation(x=float(norm[i]), y=float(np.log10(shown_var[i])), text=labels[i], showarrow=True,
                               arrowhead=0, arrowcolor=CHOSEN, ax=(-1) ** k * 36, ay=-34 - 14 * (k % 3),
                               bgcolor="rgba(255,255,255,0.9)", bordercolor=CHOSEN, borderpad=2,
                               font=dict(size=11, color="#222222"))
    fig.update_layout(title=dict(text=f"Layer {layer} neurons{' of ' + model if model else ''}: norm vs LogitVar"
                                      f"<br><sup>entropy neurons: large norm, low LogitVar, high rho (bright)</sup>"),
                      xaxis_title="||write|| (folded)", yaxis_title="LogitVar (log scale)",
                      yaxis=dict(type="log", **log_ticks(shown_var)),  # dtick 1 left a narrow range unlabelled
                      template=TEMPLATE, height=540, legend=dict(orientation="h", y=-0.15))
    return fig


def spectrum_figure(singular_values: np.ndarray, cosines: np.ndarray, k: int, neuron: str) -> go.Figure:
    """W_U singular values (line) and the neuron's |cosine| with each singular direction (bars); bottom k shaded."""
    n = len(singular_values)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=np.arange(n), y=np.abs(cosines), name=f"|cos(write {neuron}, u_i)|",
                         marker_color=CHOSEN, opacity=0.7), secondary_y=True)
    fig.add_trace(go.Scatter(x=np.arange(n), y=singular_values, name="singular value of W_U", mode="lines",
                             line=dict(color="#1f77b4", width=2)), secondary_y=False)
    fig.add_vrect(x0=n - k - 0.5, x1=n - 0.5, fillcolor="#ffbb78", opacity=0.3, line_width=0,
                  annotation_text=f"bottom k={k}", annotation_position="top left")
    fig.update_layout(title=f"W_U singular spectrum and neuron {neuron}'s cosine to each singular direction",
                      template=TEMPLATE, height=430, legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title_text="singular direction index (largest first)")
    fig.update_yaxes(title_text="singular value", secondary_y=False)
    fig.update_yaxes(title_text="|cosine|", secondary_y=True, range=[0, 1])
    return fig


def histogram_figure(counts: np.ndarray, edges: np.ndarray, neuron: str, mean: float | None) -> go.Figure:
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=centres, y=counts, width=np.diff(edges), marker_color="#1f77b4", name="tokens"))
    if mean is not None:
        fig.add_vline(x=mean, line_dash="dash", line_color=CHOSEN, annotation_text=f"mean {mean:.3f}")
    fig.update_layout(title=f"Activation of neuron {neuron} over the corpus sample", xaxis_title="activation",
                      yaxis_title="tokens (log scale)", yaxis=dict(type="log", dtick=1), template=TEMPLATE, height=380,
                      bargap=0)
    return fig


def token_bars(promoted: Sequence, suppressed: Sequence, neuron: str) -> go.Figure:
    """Top promoted and suppressed tokens of the neuron's direct logit effect, side by side."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("promoted", "suppressed"), horizontal_spacing=0.25)
    for col, rows, colour in ((1, promoted, "#2ca02c"), (2, suppressed, CHOSEN)):
        fig.add_trace(go.Bar(x=[r.value for r in rows][::-1], y=[repr(r.token)[1:-1] or "∅" for r in rows][::-1],
                             orientation="h", marker_color=colour, showlegend=False), row=1, col=col)
    fig.update_xaxes(title_text="direct logit effect per unit activation (centred)")
    fig.update_layout(title=f"Tokens neuron {neuron} pushes up and down (folded W_U)", template=TEMPLATE,
                      height=120 + 24 * max(len(promoted), 1))
    return fig


def effects_bars(labels: Sequence[str], total: Sequence[float], direct: Sequence[float], is_random: Sequence[bool],
                 quantity: str) -> go.Figure:
    """Mean |change| under mean ablation: total vs direct, chosen neurons then random ones."""
    names = [f"{label} (random)" if r else label for label, r in zip(labels, is_random, strict=True)]
    fig = go.Figure([
        go.Bar(x=names, y=list(total), name="total effect", marker_color=CHOSEN),
        go.Bar(x=names, y=list(direct), name="direct effect (norm scale frozen)", marker_color="#1f77b4"),
    ])
    fig.update_layout(barmode="group", title=f"Mean |change in {quantity}| when each neuron is mean-ablated",
                      xaxis_title="neuron", yaxis_title=f"mean |Δ {quantity}| (nats, log scale)",
                      yaxis=dict(type="log", **log_ticks([*total, *direct])), template=TEMPLATE,
                      height=430, legend=dict(orientation="h", y=-0.3))
    return fig


def share_scatter(rho: Sequence[float], share: Sequence[float | None], entropy_change: Sequence[float],
                  labels: Sequence[str], is_random: Sequence[bool]) -> go.Figure:
    """rho vs norm-mediated share of the loss effect (undefined shares left out), colour = mean |ΔH|."""
    keep = [i for i, s in enumerate(share) if s is not None]
    positions = ["top center", "bottom center", "middle right", "middle left"]
    # only the chosen neurons are named on the plot (random ones in the hover), alternating sides so close
    # points do not print over each other
    chosen = [i for i in keep if not is_random[i]]
    fig = go.Figure(go.Scatter(
        x=[rho[i] for i in keep], y=[share[i] for i in keep], mode="markers+text",
        text=[labels[i] if not is_random[i] else "" for i in keep],
        textposition=[positions[chosen.index(i) % 4] if i in chosen else "top center" for i in keep],
        customdata=[labels[i] for i in keep],
        marker=dict(size=12, color=[entropy_change[i] for i in keep], colorscale="Reds",
                    colorbar=dict(title=dict(text="mean |ΔH|")),
                    symbol=["circle-open" if is_random[i] else "circle" for i in keep], line=dict(width=2)),
        hovertemplate="%{customdata}<br>rho %{x:.3f}<br>share %{y:.3f}<extra></extra>"))
    fig.update_layout(title="Null-space fraction rho vs norm-mediated share 1 - |direct|/|total| (loss)",
                      xaxis_title="rho", yaxis_title="norm-mediated share", template=TEMPLATE, height=430,
                      xaxis=dict(range=[-0.02, 1.05]), yaxis=dict(range=[-0.05, 1.05]))
    return fig


def activation_entropy_scatter(activation: np.ndarray, entropy: np.ndarray, neuron: str) -> go.Figure:
    fig = go.Figure(go.Scattergl(x=activation, y=entropy, mode="markers", marker=dict(size=4, opacity=0.5),
                                 name="token"))
    fig.update_layout(title=f"Per token: activation of {neuron} vs the model's entropy",
                      xaxis_title=f"activation of {neuron}", yaxis_title="entropy of the prediction (nats)",
                      template=TEMPLATE, height=420)
    return fig


def unigram_histogram(cosines: np.ndarray, layer: int) -> go.Figure:
    fig = go.Figure(go.Histogram(x=cosines, nbinsx=80, marker_color="#9467bd"))
    fig.update_layout(title=f"Cosine of each layer-{layer} neuron's logit effect with the unigram direction",
                      xaxis_title="cosine(w_out W_U, unigram direction)", yaxis_title="neurons (log scale)",
                      yaxis=dict(type="log", dtick=1), template=TEMPLATE, height=380)
    return fig


def frozen_unigram_figure(labels: Sequence[str], total: Sequence[float], frozen: Sequence[float],
                          kl_clean: float, kl_ablated: Sequence[float]) -> go.Figure:
    """Left: mean |Δ loss| with and without the unigram component frozen. Right: how far each ablation moves
    KL(model || unigram) from its clean value (the KLs themselves are all about the same size, so the bars show
    the change)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean |Δ loss|: ablation vs frozen unigram",
                                                        f"Δ KL(model || unigram) from clean ({kl_clean:.3f} nats)"))
    fig.add_trace(go.Bar(x=list(labels), y=list(total), name="ablation", marker_color=CHOSEN), row=1, col=1)
    fig.add_trace(go.Bar(x=list(labels), y=list(frozen), name="ablation, unigram component frozen",
                         marker_color="#1f77b4"), row=1, col=1)
    change = [k - kl_clean for k in kl_ablated]
    fig.add_trace(go.Bar(x=list(labels), y=change, name="KL after ablation − clean KL", marker_color="#9467bd",
                         text=[f"{c:+.3g}" for c in change], textposition="outside",
                         customdata=list(kl_ablated), hovertemplate="%{x}: KL %{customdata:.4f} (%{y:+.4f})"
                         "<extra></extra>"), row=1, col=2)
    fig.add_hline(y=0, line_color="#888888", row=1, col=2)
    fig.update_yaxes(title_text="nats", row=1, col=1)
    fig.update_yaxes(title_text="Δ nats", row=1, col=2)
    fig.update_xaxes(title_text="neuron")
    fig.update_layout(barmode="group", template=TEMPLATE, height=430, legend=dict(orientation="h", y=-0.25),
                      title="Token-frequency neurons: effect through the unigram direction")
    return fig


def induction_figure(activation: np.ndarray, labels: Sequence[str], is_random: Sequence[bool],
                     entropy: np.ndarray, loss: np.ndarray, half_len: int) -> go.Figure:
    """Per-position activation (chosen: colour, random: grey) above the model's entropy and loss."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("neuron activation (mean over sequences)", "model entropy and loss"))
    positions = np.arange(1, activation.shape[1] + 1)
    for row, label, random in zip(activation, labels, is_random, strict=True):
        fig.add_trace(go.Scatter(x=positions, y=row, mode="lines", name=label + (" (random)" if random else ""),
                                 line=dict(color=RANDOM if random else None, width=1 if random else 2.5),
                                 opacity=0.5 if random else 1.0), row=1, col=1)
    fig.add_trace(go.Scatter(x=positions, y=entropy, name="entropy", line=dict(color="#1f77b4")), row=2, col=1)
    fig.add_trace(go.Scatter(x=positions, y=loss, name="loss", line=dict(color="#ff7f0e", dash="dot")), row=2, col=1)
    for row in (1, 2):
        fig.add_vline(x=half_len + 0.5, line_dash="dash", line_color="black", row=row, col=1)
    fig.update_yaxes(title_text="activation", row=1, col=1)
    fig.update_yaxes(title_text="nats", row=2, col=1)
    fig.update_xaxes(title_text="position (the sequence repeats after the dashed line)", row=2, col=1)
    fig.update_layout(title="Induction: random tokens, then the same tokens again", template=TEMPLATE, height=620)
    return fig


def text_figure(tokens: Sequence[str], activation: np.ndarray, neurons: Sequence[str], entropy: np.ndarray,
                excluded: Sequence[int] = (), reasons: Mapping[int, str] | None = None) -> go.Figure:
    """Activations per token (excluded positions, measured sinks or a prepended BOS, left out of the lines and the
    axis range, each named above the plot with its reason from `reasons`: position -> why) and the model's
    entropy."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = np.arange(len(tokens))
    shown = np.asarray(activation, dtype=float).copy()
    if len(excluded):
        shown[:, [i for i in excluded if i < shown.shape[1]]] = np.nan
    for row, label in zip(shown, neurons, strict=True):
        fig.add_trace(go.Scatter(x=x, y=row, mode="lines+markers", name=f"activation {label}"), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=entropy, mode="lines", name="entropy", line=dict(color="black", dash="dot")),
                  secondary_y=True)
    ticks = [repr(t)[1:-1] or "∅" for t in tokens]
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=ticks, tickangle=-60, title_text="token")
    fig.update_yaxes(title_text="activation", secondary_y=False)
    fig.update_yaxes(title_text="entropy of the next-token prediction (nats)", secondary_y=True)
    fig.update_layout(title="Your text: neuron activations and the model's entropy at each token", template=TEMPLATE,
                      height=460, legend=dict(orientation="h", y=-0.45))
    if len(excluded):
        why = reasons or {}
        named = "; ".join(f"{i} {tokens[i]!r} ({why.get(i, 'excluded')}; activation "
                          f"{', '.join(f'{row[i]:.3g}' for row in activation)})" for i in excluded if i < len(tokens))
        fig.add_annotation(text=f"Left out of the lines and the scale: {named}", xref="paper",
                           yref="paper", x=0, y=1.06, showarrow=False, xanchor="left", font=dict(size=11))
    return fig
