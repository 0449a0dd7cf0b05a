"""Plotly figures of the Fourier-features page. Plain numpy in, figures out; nothing here runs a model."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=60, b=60))


def _period_text(period: float) -> str:
    return f"{period:.2f}".rstrip("0").rstrip(".")


def _period_ticks(periods: np.ndarray, max_ticks: int = 14) -> tuple[list[int], list[str]]:
    """Ticks on the frequency axis (k = 1..N/2) labelled by period, always including periods 10, 5, 2.5, 2, and
    never two ticks closer than the axis can print (so '2.5' and '2.38' do not overlap)."""
    n_freq = len(periods)
    special = [int(np.flatnonzero(np.isclose(periods, p))[0]) + 1 for p in (10.0, 5.0, 2.5, 2.0)
               if np.any(np.isclose(periods, p))]
    gap = max(1.0, n_freq / max_ticks)
    chosen = sorted(special)
    for k in np.unique(np.linspace(1, n_freq, num=min(max_ticks, n_freq)).round().astype(int)).tolist():
        if all(abs(k - c) >= gap for c in chosen):
            chosen.append(k)
    ordered = sorted(chosen)
    return ordered, [_period_text(periods[k - 1]) for k in ordered]


def spectrum_figure(periods: np.ndarray, magnitude: np.ndarray, outlier_periods: Sequence[float],
                    title: str, labelled: int = 5, baseline: np.ndarray | None = None,
                    baseline_name: str = "baseline") -> go.Figure:
    """Magnitude per frequency, the x-axis labelled by period N/k, outliers in red (the strongest `labelled`
    of them annotated with their period), and the baseline (control) per frequency as a line when given."""
    ks = np.arange(1, len(periods) + 1)
    is_outlier = np.isin(np.round(periods, 9), np.round(np.asarray(list(outlier_periods), dtype=float), 9))
    fig = go.Figure(go.Bar(x=ks, y=magnitude, marker_color=np.where(is_outlier, "#d6604d", "#4393c3"),
                           customdata=periods, name="magnitude",
                           hovertemplate="k = %{x}<br>period = %{customdata:.3g}<br>|F·X| = %{y:.4g}<extra></extra>"))
    if baseline is not None:
        fig.add_trace(go.Scatter(x=ks, y=baseline, mode="lines", name=baseline_name, line=dict(color="#333333",
                                                                                              dash="dot")))
    strongest = sorted(ks[is_outlier], key=lambda k: -magnitude[k - 1])[:labelled]
    for rank, k in enumerate(sorted(strongest)):
        fig.add_annotation(x=k, y=magnitude[k - 1], text=f"T={_period_text(periods[k - 1])}", showarrow=True,
                           arrowhead=2, ax=0, ay=-22 - 24 * (rank % 2), font=dict(color="#b2182b"))
    tickvals, ticktext = _period_ticks(periods)
    fig.update_layout(title=title, xaxis=dict(title="period N/k (frequency k = 1 … N/2)", tickvals=tickvals,
                                              ticktext=ticktext),
                      yaxis_title="Fourier magnitude (L2 over cos, sin, features)", height=430, **LAYOUT)
    return fig


def layer_frequency_heatmap(values: np.ndarray, periods: np.ndarray, layer_names: Sequence[str], title: str,
                            colorbar: str) -> go.Figure:
    """Layers (rows) x frequency (columns, labelled by period) heatmap."""
    ks = np.arange(1, len(periods) + 1)
    tickvals, ticktext = _period_ticks(periods)
    fig = go.Figure(go.Heatmap(z=values, x=ks, y=list(layer_names), colorscale="Viridis",
                               colorbar=dict(title=colorbar), customdata=np.tile(periods, (len(values), 1)),
                               hovertemplate="%{y}<br>k = %{x}, period %{customdata:.3g}<br>%{z:.4g}<extra></extra>"))
    fig.update_layout(title=title, xaxis=dict(title="period N/k", tickvals=tickvals, ticktext=ticktext),
                      yaxis=dict(title="layer", autorange="reversed"),
                      height=max(320, 120 + 16 * len(layer_names)), **LAYOUT)
    return fig


def lens_accuracy_figure(exact: np.ndarray, within_2: np.ndarray, within_10: np.ndarray) -> go.Figure:
    """Residual logit-lens accuracy after each block: exact, within +-2, within +-10."""
    layers = np.arange(len(exact))
    fig = go.Figure()
    for values, name, dash in ((exact, "exact", "solid"), (within_2, "within ±2", "dash"),
                               (within_10, "within ±10", "dot")):
        fig.add_trace(go.Scatter(x=layers, y=values, mode="lines+markers", name=name, line=dict(dash=dash)))
    fig.update_layout(title="Logit lens on the residual stream: accuracy after each block",
                      xaxis=dict(title="layer", dtick=1), yaxis=dict(title="accuracy", range=[0, 1.02]), height=380,
                      **LAYOUT)
    return fig


def answer_window_heatmap(logits: np.ndarray, answer: int, module: str, window: int = 12) -> go.Figure:
    """One prompt's per-layer number logits of a module (rows: layers) around the correct answer."""
    n_numbers = logits.shape[1]
    low, high = max(0, answer - window), min(n_numbers, answer + window + 1)
    numbers = np.arange(low, high)
    fig = go.Figure(go.Heatmap(z=logits[:, low:high], x=[str(n) for n in numbers],
                               y=[f"layer {layer}" for layer in range(len(logits))], colorscale="RdBu_r", zmid=0,
                               colorbar=dict(title="logit")))
    fig.add_vline(x=answer - low, line=dict(color="black", dash="dot"))
    fig.update_layout(title=f"{module} output read through W_U (numbers around the answer {answer})",
                      xaxis_title="number", yaxis=dict(title="layer", autorange="reversed"),
                      height=max(300, 120 + 22 * len(logits)), **LAYOUT)
    return fig


def top_components_figure(logits: np.ndarray, rebuilt: np.ndarray, answer: int, labels: Sequence[str]) -> go.Figure:
    """The final number logits (centred) and their rebuild from the top Fourier components."""
    numbers = np.arange(len(logits))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=numbers, y=logits - logits.mean(), name="number logits (centred)",
                             line=dict(color="#4393c3")))
    fig.add_trace(go.Scatter(x=numbers, y=rebuilt, name=f"top {len(labels)} components: " + ", ".join(labels),
                             line=dict(color="#d6604d", dash="dash")))
    fig.add_vline(x=answer, line=dict(color="black", dash="dot"), annotation_text=f"answer {answer}")
    fig.update_layout(title="The prediction rebuilt from its top Fourier components", xaxis_title="number",
                      yaxis_title="logit", height=400, legend=dict(orientation="h", y=-0.25), **LAYOUT)
    return fig


def error_kinds_figure(row_labels: Sequence[str], counts: Sequence[dict], prompts: int) -> go.Figure:
    """Stacked share of prompts per error kind for each filter (multiples of 10 vs small vs other)."""
    kinds = (("multiple_of_10", "multiple of 10", "#d6604d"), ("small_lt_6", "small (|e| < 6)", "#4393c3"),
             ("other", "other", "#999999"), ("not_a_number", "not a number", "#333333"))
    fig = go.Figure()
    for key, name, colour in kinds:
        fig.add_trace(go.Bar(x=list(row_labels), y=[c[key] / max(1, prompts) for c in counts], name=name,
                             marker_color=colour))
    fig.update_layout(barmode="stack", title="Wrong answers by kind of error, per filter",
                      xaxis_title="filter", yaxis=dict(title="share of prompts", tickformat=".0%"), height=420,
                      **LAYOUT)
    return fig


def error_histogram_figure(row_labels: Sequence[str], errors: Sequence[np.ndarray], clip: int = 30) -> go.Figure:
    """Filters (rows) x error value (prediction - answer, wrong answers only, clipped to +-clip): prompt counts."""
    values = np.arange(-clip, clip + 1)
    counts = []
    for row in errors:
        wrong = row[~np.isnan(row) & (row != 0)]
        clipped = np.clip(wrong, -clip, clip).astype(int) + clip
        counts.append(np.bincount(clipped, minlength=len(values)))
    fig = go.Figure(go.Heatmap(z=np.array(counts), x=values, y=list(row_labels), colorscale="Blues",
                               colorbar=dict(title="prompts"),
                               hovertemplate="%{y}<br>error %{x}<br>%{z} prompts<extra></extra>"))
    for edge in (-10, 10):
        fig.add_vline(x=edge, line=dict(color="#d6604d", dash="dot", width=1))
    fig.update_layout(title=f"Error histograms: prediction − answer of wrong answers (ends collect |e| ≥ {clip})",
                      xaxis=dict(title="error", dtick=5), yaxis=dict(title="filter", autorange="reversed"),
                      height=120 + 40 * len(row_labels), **LAYOUT)
    return fig
