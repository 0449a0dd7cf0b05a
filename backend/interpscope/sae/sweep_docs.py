"""The sweep's table as a Result document: one row per SAE (its settings, then its evaluation on the shared held-out
tokens). Rows keep the figures the Pareto analysis reads (L0, FVU, loss recovered), the shrinkage gamma
(E||x_hat||^2 / E[x . x_hat], docs/methods/sae.md), dead and dense fractions, and what it cost (CE increase, KL).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from interpscope.figures.palette import ARCHITECTURE_COLOURS as COLOURS  # one colour per architecture
from interpscope.results import Result

METRICS = {"loss_recovered": (True, "loss recovered"), "fvu": (False, "FVU")}  # name: (higher is better, label)

ROW_FIGURES = ("l0", "fvu", "explained_variance", "loss_recovered", "ce_increase", "kl", "shrinkage", "cosine",
               "dead_fraction", "dense_fraction", "ce_clean", "ce_zero", "ce_sae", "n_tokens")


def sweep_row(spec: Any, folder: str, evaluation: dict, trained: dict) -> dict:
    """One table row: the grid point (name, architecture, label, width, its knob), training tokens, evaluation."""
    cls = spec.arch_class
    row: dict[str, Any] = {"name": spec.run_name(), "folder": folder, "architecture": cls.short_name,
                           "label": cls.label, "width": spec.width, "knob": cls.knob.kind,
                           "k": spec.k if cls.knob.is_count else None,
                           "sparsity": None if cls.knob.is_count else spec.coefficient,
                           "training_tokens": int(trained.get("training_tokens", 0))}
    row.update({key: evaluation.get(key) for key in ROW_FIGURES})
    return row


def setting_text(row: dict) -> str:
    """'k = 32' or 'L1 coefficient 2': a row's sparsity setting in words."""
    if row.get("k") is not None:
        return f"k = {row['k']}"
    names = {"l1": "L1 coefficient", "l0": "L0 coefficient"}
    return f"{names.get(str(row.get('knob')), 'coefficient')} {row.get('sparsity'):g}"


def frontier(rows: list[dict], metric: str) -> list[dict]:
    """The non-dominated rows (L0 lower, metric better), sorted by L0."""
    higher = METRICS[metric][0]
    points = [r for r in rows if _finite(r.get("l0")) and _finite(r.get(metric))]

    def better(a: dict, b: dict) -> bool:  # a dominates b
        va, vb = (a[metric], b[metric]) if higher else (-a[metric], -b[metric])
        return a["l0"] <= b["l0"] and va >= vb and (a["l0"] < b["l0"] or va > vb)

    kept = [p for p in points if not any(better(q, p) for q in points if q is not p)]
    return sorted(kept, key=lambda r: (r["l0"], r["name"]))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# what every row must hold for the frontiers, the ratios and the figure: (field, kind, what it must be)
ROW_FIELDS = (("name", str, "a name"), ("architecture", str, "a name"), ("label", str, "a name"),
              ("l0", float, "a finite number of 0 or more"), ("fvu", float, "a finite number of 0 or more"),
              ("loss_recovered", float, "a finite number"), ("width", int, "a whole number"),
              ("training_tokens", int, "a whole number"))


def row_problem(rows: Any) -> str | None:
    """What makes a table's rows unusable, naming the first bad row (1-based, with its name) and field, or None.
    A table `interpscope sae sweep` wrote always passes; a hand-edited one with NaN, a string or a missing figure
    would otherwise drop that SAE from its frontier, or shift every ratio, without a word."""
    if not isinstance(rows, list):
        return f"its rows are a JSON {type(rows).__name__}, not a list"
    names: set[str] = set()
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            return f"row {number} is a JSON {type(row).__name__}, not an object"
        where = f"row {number}" + (f" ({row['name']})" if isinstance(row.get("name"), str) else "")
        for key, kind, wanted in ROW_FIELDS:
            value = row.get(key)
            if key not in row or value is None:
                return f"{where} has no {key} (it needs {wanted})"
            if kind is str:
                ok = isinstance(value, str) and value.strip() != ""
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:
                ok = (_finite(value) and not isinstance(value, bool)
                      and (key == "loss_recovered" or value >= 0))
            if not ok:
                shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)[:40]
                return f"{where} has {key} = {shown} (it needs {wanted})"
        seed = row.get("seed")  # optional: a second training seed's rows (issue 45.14)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            return f"{where} has seed = {repr(seed)[:40]} (it needs a whole number of 0 or more)"
        if row["name"] in names:
            return f"{where} repeats the name {row['name']!r} of an earlier row"
        names.add(row["name"])
    return None


def hover_text(row: dict) -> str:
    """A point's settings and figures, for the figure's hover."""
    return (f"{row['label']} · {setting_text(row)} · width {row['width']}<br>L0 {row['l0']:.1f} · loss recovered "
            f"{row['loss_recovered']:.4f} · FVU {row['fvu']:.3f}<br>{row['training_tokens']:,} training tokens · "
            f"{row['name']}")


@dataclass
class SweepTable(Result):
    """Every SAE of a sweep, evaluated on the same held-out tokens (`eval`: how many, which split)."""

    SCHEMA: ClassVar[str] = "interpscope.sae_sweep"
    SCHEMA_VERSION: ClassVar[int] = 1

    model_name: str
    hook_name: str
    width: int
    tokens_per_sae: int
    cache_tokens: int
    eval: dict
    rows: list[dict] = field(default_factory=list)
    target_hook: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> SweepTable:
        if data.get("schema") != cls.SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {cls.SCHEMA!r}")
        return cls(model_name=data["model_name"], hook_name=data["hook_name"], width=int(data["width"]),
                   tokens_per_sae=int(data["tokens_per_sae"]), cache_tokens=int(data["cache_tokens"]),
                   eval=dict(data["eval"]), rows=[dict(r) for r in data["rows"]], target_hook=data.get("target_hook"))

    @property
    def architectures(self) -> list[str]:
        """Architectures in the order they first appear."""
        return list(dict.fromkeys(row["architecture"] for row in self.rows))

    def tidy(self) -> list[dict]:
        return [{"model": self.model_name, "hook": self.hook_name, "target_hook": self.target_hook, **row}
                for row in self.rows]

    def figure(self):
        return pareto_figure(self.rows, {metric: {arch: [r["name"] for r in frontier(
            [r for r in self.rows if r["architecture"] == arch], metric)] for arch in self.architectures}
            for metric in METRICS})


def pareto_figure(rows: list[dict], frontiers: dict[str, dict[str, list[str]]]):
    """Two panels side by side (frontiers: metric -> architecture -> names on its frontier); hover shows a point's
    settings and figures."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from interpscope.figures.draw import log_ticks

    rows_all = list(rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("L0 vs loss recovered (up-left is better)",
                                                        "L0 vs FVU (down-left is better)"))
    by_arch: dict[str, list[dict]] = {}
    for row in rows:
        by_arch.setdefault(row["architecture"], []).append(row)
    for col, metric in enumerate(METRICS, start=1):
        for arch, rows in by_arch.items():
            colour = COLOURS.get(arch, "#888888")
            on_front = set(frontiers[metric].get(arch, []))
            front = sorted((r for r in rows if r["name"] in on_front), key=lambda r: r["l0"])
            off = [r for r in rows if r["name"] not in on_front]
            label = rows[0]["label"]
            fig.add_trace(go.Scatter(
                x=[r["l0"] for r in front], y=[r[metric] for r in front], mode="lines+markers", name=label,
                legendgroup=arch, showlegend=col == 1, line={"color": colour}, marker={"size": 9},
                unselected={"marker": {"opacity": 1.0}},  # a click opens one SAE: the others keep their look
                customdata=[r["folder"] for r in front], hovertext=[hover_text(r) for r in front],
                hoverinfo="text"), row=1, col=col)
            if off:
                fig.add_trace(go.Scatter(
                    x=[r["l0"] for r in off], y=[r[metric] for r in off], mode="markers",
                    name=f"{label} (off the frontier)", legendgroup=arch, showlegend=False,
                    marker={"color": colour, "size": 7, "opacity": 0.35, "symbol": "circle-open"},
                    unselected={"marker": {"opacity": 0.35}},
                    customdata=[r["folder"] for r in off], hovertext=[hover_text(r) for r in off],
                    hoverinfo="text"), row=1, col=col)
        fig.update_xaxes(type="log", title_text="L0 (features active per token, log scale)", row=1, col=col,
                         **log_ticks(r["l0"] for r in rows_all))
        fig.update_yaxes(title_text=METRICS[metric][1], row=1, col=col)
    fig.update_layout(height=460, margin={"l": 50, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.2})
    return fig
