"""Where the explained value went: the readout beside a relevance map, led by the split of the value, not by an error.

LRP methods (conservation): the value splits into the input tokens' relevance, what AttnLRP drops at the softmaxes
(transformers only; CP-LRP and MambaLRP drop nothing there), what biases absorb, and a numerical rest (the relative
error). Integrated Gradients (completeness): relevance sums to f(x) - f(baseline), up to an integration gap.
Gradient x Input and occlusion obey no law: their sum is shown beside the value. Every sentence is built from the
numbers it sits beside: the relevance held by excluded tokens (measured sinks, a prepended BOS) is named, and the
wording follows the model's kind (no position embeddings or attention sinks on a Mamba model).
"""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from interpscope.sinks import words as kind_words

COLOURS = {"input tokens": "#d6604d", "softmax (dropped by AttnLRP)": "#4393c3", "biases": "#999999",
           "rest (numerical error)": "#333333", "f(baseline)": "#999999",
           "minus the integration gap": "#333333"}


@dataclass
class Readout:
    """The explained value, its label, the parts it splits into (label, value) and the sentence saying so."""

    value_label: str
    value: float
    parts: list[tuple[str, float]]
    sentence: str
    error_label: str | None = None
    error: float | None = None


def _share(part: float, total: float) -> str:
    return f" ({part / total:.0%})" if total else ""


def excluded_words(result, total: float) -> str:
    """'; <bos> (excluded: measured attention sink, 13x the median norm) holds R = -11.0, the other 5 tokens
    carry +7.79' from the result's own numbers; '' when nothing is excluded. `total` is what all tokens carry."""
    rows = [row for row in (getattr(result, "sinks", None) or []) if row["position"] < len(result.relevance)]
    if not rows:
        return ""
    held = [float(result.relevance[row["position"]]) for row in rows]
    named = ", ".join(f"{row['token']!r} (excluded: {row['reason']}) holds R = {value:+.3g}"
                      for row, value in zip(rows, held, strict=True))
    rest = len(result.relevance) - len(rows)
    return f"; {named}, the other {rest} token{'s' if rest != 1 else ''} carry {total - sum(held):+.3g}"


def _convergence_words(k) -> str:
    """Whether the IG gap shrinks with more steps, from the gap at half the steps (measured beside it)."""
    if k.half_gap is None or not k.half_steps:
        return ""
    scale = abs(k.value - k.baseline_value) or 1.0
    if abs(k.gap) / scale < 0.01 and abs(k.half_gap) / scale < 0.01:
        verdict = "both are under 1% of f(x) - f(baseline): the integral has converged"
    elif abs(k.gap) <= 0.5 * abs(k.half_gap) and abs(k.gap) / scale < 0.05:
        verdict = "the gap shrinks with more steps, so it is the discretisation of the integral"
    elif abs(k.gap) <= 0.5 * abs(k.half_gap):
        verdict = (f"it halved from {k.half_steps} to {k.steps} steps but is still {abs(k.gap) / scale:.0%} of "
                   "f(x) - f(baseline), and two step counts do not show that it keeps shrinking: the convergence "
                   "check does")
    else:
        verdict = ("the gap does not shrink with more steps: the path from the baseline is rough on this model "
                   "(the target jumps along it), so more steps will not close it; see the convergence check")
    return f" At {k.half_steps} steps the gap was {k.half_gap:+.3g}: {verdict}."


def readout(result) -> Readout:
    """The readout of a RelevanceResult (interpscope.relevance.api), from its own numbers."""
    target, y = result.target, float(result.logit)
    label = target.value_label
    name = label[0].lower() + label[1:]
    relevance_sum = float(sum(result.relevance))
    kind = kind_words(getattr(result, "model_kind", None) or ())
    c = result.conservation
    if result.law == "conservation" and c is not None:
        softmax_matters = bool(getattr(result, "through_softmax", False))
        parts = [("input tokens", c.input_sum)]
        if softmax_matters:
            parts.append(("softmax (dropped by AttnLRP)", c.softmax_sum))
        if c.bias_sum is not None:  # a model without biases has no bias share to draw (absent, not 0)
            parts.append(("biases", c.bias_sum))
        parts.append(("rest (numerical error)",
                      y - c.input_sum - (c.bias_sum or 0.0) - (c.softmax_sum if softmax_matters else 0)))
        words = [f"The input tokens carry {c.input_sum:.3g} of the {name} {y:.3g}{_share(c.input_sum, y)}"
                 f"{excluded_words(result, c.input_sum)}"]
        if softmax_matters:
            words.append(f"the softmaxes drop {c.softmax_sum:.3g}{_share(c.softmax_sum, y)}: AttnLRP does not "
                         "conserve through them on its own")
        if c.bias_sum is not None and abs(c.bias_sum) > 1e-6 * max(abs(y), 1e-12):
            words.append(f"biases{kind['bias_extra']} absorb {c.bias_sum:.3g}{_share(c.bias_sum, y)}")
        sentence = "; ".join(words) + f". What is left over is numerical (relative error {c.relative_error:.1e})."
        return Readout(label, y, parts, sentence, "relative error", c.relative_error)
    completeness = getattr(result, "completeness", None)
    if result.law == "completeness" and completeness is not None:
        k = completeness
        parts = [("input tokens", k.relevance_sum), ("f(baseline)", k.baseline_value),
                 ("minus the integration gap", k.value - k.baseline_value - k.relevance_sum)]
        sentence = (f"Integrated Gradients is complete: relevance should sum to f(x) - f(baseline) = {k.value:.3g} - "
                    f"{k.baseline_value:.3g} = {k.value - k.baseline_value:.3g} (baseline: {k.baseline_label}). "
                    f"At {k.steps} steps it sums to {k.relevance_sum:.3g}{excluded_words(result, k.relevance_sum)}: "
                    f"a gap of {k.gap:+.3g} ({k.relative_gap:.1%}).{_convergence_words(k)}")
        return Readout(label, y, parts, sentence, "completeness gap", k.relative_gap)
    sentence = (f"{result.method_label} obeys no conservation law: its relevance sums to {relevance_sum:.3g}"
                f"{excluded_words(result, relevance_sum)}, while the {name} is {y:.3g}.")
    return Readout(label, y, [("input tokens", relevance_sum)], sentence)


def readout_figure(data: Readout, title: str = "") -> go.Figure:
    """One stacked bar of the parts (negative parts to the left of zero), with the explained value marked."""
    fig = go.Figure()
    for label, value in data.parts:
        fig.add_trace(go.Bar(x=[value], y=[""], orientation="h", name=f"{label}: {value:.3g}",
                             marker_color=COLOURS.get(label, "#888888"),
                             hovertemplate=f"{label}: %{{x:.4g}}<extra></extra>"))
    fig.add_vline(x=data.value, line=dict(color="black", dash="dash"),
                  annotation_text=f"{data.value_label}: {data.value:.3g}", annotation_position="top")
    fig.update_layout(barmode="relative", template="plotly_white", height=230, title=title or None,
                      margin=dict(l=10, r=10, t=50 if title else 30, b=10), xaxis_title=None,
                      legend=dict(orientation="h", yanchor="top", y=-0.35, x=0), yaxis=dict(visible=False))
    return fig
