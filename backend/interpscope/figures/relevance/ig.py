"""Figures of Integrated Gradients' convergence check: the completeness gap per step count, and the explained value
along the straight path from the baseline to the input (where a jump makes the gap refuse to shrink). Plain numbers
in (interpscope.relevance.baselines.IGConvergence), plotly figures and one sentence out."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def convergence_sentence(data) -> str:
    """What the gaps per step count say, from their numbers."""
    rows = data.rows
    difference = data.value - data.baseline_value
    gaps = ", ".join(f"{r['gap']:+.3g} at {r['steps']}" for r in rows)
    jump = data.steepest
    said = (f"From {data.baseline_label}, relevance should sum to f(x) - f(baseline) = {difference:.3g}; the gap is "
            f"{gaps} steps. ")
    if data.shrinks:
        said += "It shrinks at every doubling of the steps: the gap is the discretisation of the integral."
    else:
        said += (f"It does not shrink steadily with more steps: along the path the target jumps from "
                 f"{jump['value_from']:.3g} to {jump['value_to']:.3g} between alpha = {jump['alpha_from']:.3g} and "
                 f"{jump['alpha_to']:.3g}, so the integrand is spiky there and the quadrature's few points near it "
                 "decide the sum. The map's relevances carry that error.")
    return said


def convergence_figure(rows: Sequence[dict], alphas: Sequence[float], values: Sequence[float],
                       baseline_label: str) -> go.Figure:
    """Left: the completeness gap (sum R - (f(x) - f(baseline))) per step count; right: f along the path."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("completeness gap per step count",
                                                       f"target along the path from {baseline_label}"))
    steps = [r["steps"] for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=[r["gap"] for r in rows], mode="lines+markers", name="gap",
                             hovertemplate="%{x} steps: gap %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.add_hline(y=0, line=dict(color="#999", dash="dot"), row=1, col=1)
    fig.add_trace(go.Scatter(x=list(alphas), y=list(values), mode="lines", name="f(baseline + alpha (x - baseline))",
                             hovertemplate="alpha %{x:.4f}: %{y:.4g}<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text="steps (Gauss-Legendre, log)", type="log", tickvals=steps, row=1, col=1)
    fig.update_xaxes(title_text="alpha (0 = baseline, 1 = input)", row=1, col=2)
    fig.update_yaxes(title_text="gap", row=1, col=1)
    fig.update_yaxes(title_text="explained value", row=1, col=2)
    fig.update_layout(template="plotly_white", height=360, showlegend=False, margin=dict(l=60, r=20, t=50, b=60))
    return fig


def convergence_table(rows: Sequence[dict], tokens: Sequence[str], excluded: Sequence[int] = ()) -> list[dict]:
    """One row per step count: sum of relevance, gap, relative gap, and the token with the largest |R| (excluded
    positions, measured sinks or a prepended BOS, are never ranked)."""
    table = []
    ranked = [i for i in range(len(tokens)) if i not in set(excluded)] or list(range(len(tokens)))
    for r in rows:
        top = max(ranked, key=lambda i: abs(r["relevance"][i]))
        table.append({"steps": r["steps"], "sum of R": r["relevance_sum"], "gap": r["gap"],
                      "relative gap": f"{r['relative_gap']:.1%}",
                      "largest |R|": f"{tokens[top]!r} {r['relevance'][top]:+.3g}"})
    return table
