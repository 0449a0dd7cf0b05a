"""The bench's one document: per metric, each measured number beside its control (chance level, random SAE, random
explanation), what the metric means, its settings and details (per letter, per task, per feature).

Schema "interpscope.sae_bench" v1. `interpscope sae bench --json`, the SAE overview page's JSON export and
`SAEBenchResult.to_dict()` are the same document, timings (`seconds`) aside.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interpscope.results import Result


@dataclass
class Measure:
    """One number of a metric beside its control. higher_is_better says which way is good (absorption: lower)."""

    name: str
    value: float | None
    control: float | None
    control_name: str
    higher_is_better: bool = True
    # a 95% percentile-bootstrap interval of the value and of the control over `over` (e.g. "6 features"), where the
    # number is a mean over a sample (issue 45.14); absent where it is not
    low: float | None = None
    high: float | None = None
    control_low: float | None = None
    control_high: float | None = None
    over: str | None = None

    def sentence(self) -> str:
        """What the number says against its control, computed from the two numbers (and their intervals: two
        intervals that overlap say the gap is not resolved by this sample)."""
        if self.value is None:
            return f"{self.name}: not measured."
        shown = f"{self.value:.3f}" + (f" [{self.low:.3f}, {self.high:.3f}]" if self.low is not None else "")
        if self.control is None:
            return f"{self.name} {shown} (no control measured)."
        control = f"{self.control:.3f}" + (f" [{self.control_low:.3f}, {self.control_high:.3f}]"
                                            if self.control_low is not None else "")
        gap = self.value - self.control
        overlap = (self.low is not None and self.control_low is not None and self.high is not None
                   and self.control_high is not None and self.low <= self.control_high
                   and self.control_low <= self.high)
        if abs(gap) < 0.02:
            verdict = "about the same as"
        elif overlap:
            verdict = "not distinguishable on this sample from"
        else:
            better = (gap > 0) == self.higher_is_better
            verdict = f"{'better' if better else 'worse'} than"
        note = f"; 95% bootstrap intervals over {self.over}" if self.over and self.low is not None else ""
        return (f"{self.name} {shown}: {verdict} the {control} of {self.control_name} "
                f"({gap:+.3f}; {'higher' if self.higher_is_better else 'lower'} is better{note}).")


@dataclass
class MetricResult:
    """One metric's numbers (`measures`), what it means, how it was run, its details and seconds taken."""

    metric: str
    meaning: str
    measures: list[Measure]
    settings: dict[str, Any] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)
    seconds: float | None = None

    def measure(self, name: str) -> Measure:
        for measure in self.measures:
            if measure.name == name:
                return measure
        raise KeyError(name)


@dataclass
class SAEBenchResult(Result):
    """SAEBench-style metrics of one SAE (absent metrics were not asked for; `skipped` says why one could not run)."""

    SCHEMA = "interpscope.sae_bench"
    SCHEMA_VERSION = 2  # 2: measures' bootstrap intervals (low, high, control_low, control_high, over)

    sae: str
    sae_weights_sha256: str | None
    architecture: str
    model_name: str
    hook_name: str
    d_sae: int
    metrics: dict[str, MetricResult]
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None

    def tidy(self) -> list[dict[str, Any]]:
        """One row per measure: metric, measure, value, control and what the control is."""
        return [{"metric": name, "measure": m.name, "value": m.value, "control": m.control,
                 "control_name": m.control_name, "higher_is_better": m.higher_is_better}
                for name, metric in self.metrics.items() for m in metric.measures]

    def figure(self):
        """Grouped bars: each measure and its control."""
        import plotly.graph_objects as go

        rows = self.tidy()
        labels = [f"{r['metric']}: {r['measure']}" for r in rows]
        fig = go.Figure([
            go.Bar(name="this SAE", x=labels, y=[r["value"] for r in rows], marker_color="#1f77b4"),
            go.Bar(name="control", x=labels, y=[r["control"] for r in rows], marker_color="#bbbbbb",
                   customdata=[r["control_name"] for r in rows],
                   hovertemplate="%{x}<br>control %{y:.3f}: %{customdata}<extra></extra>")])
        fig.update_layout(barmode="group", height=420, margin={"t": 40, "b": 160},
                          title=f"SAEBench-style metrics of {self.sae} beside their controls",
                          yaxis_title="score", legend={"orientation": "h", "y": 1.08})
        return fig
