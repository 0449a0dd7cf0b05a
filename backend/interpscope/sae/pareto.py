"""Pareto frontiers of a sweep, and each architecture's L0 relative to the baseline at matched fidelity.

Frontier: an architecture's non-dominated SAEs, for L0 (lower is better) against loss recovered (higher is better)
and against FVU (lower is better): a point is dropped when another of the same architecture is at least as good on
both and better on one. Along a frontier, fidelity improves as L0 grows.

Matched fidelity: log L0 is interpolated linearly in the fidelity value along each frontier (L0 spans decades; a
frontier is roughly straight in log L0), only inside the range both frontiers cover (never extrapolated). On
`GRID_POINTS` evenly spaced values of that overlap the ratio L0_arch / L0_baseline is computed; the Gated SAE
paper's claim is a ratio of about 0.5 at matched loss recovered. Where the overlap is empty the ratio is absent,
and the document says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from interpscope.results import Result
from interpscope.sae.sweep_docs import METRICS, SweepTable, frontier, pareto_figure

GRID_POINTS = 9


def log_l0_at(front: list[dict], metric: str, values: np.ndarray) -> np.ndarray:
    """log L0 along a frontier at the given metric values (linear interpolation; NaN outside its range)."""
    xs = np.array([r[metric] for r in front], dtype=float)
    ys = np.log(np.array([r["l0"] for r in front], dtype=float))
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    out = np.interp(values, xs, ys)
    out[(values < xs[0]) | (values > xs[-1])] = np.nan
    return out


@dataclass
class MatchedRatio:
    """One architecture against the baseline at matched `metric`: the overlap and the ratio across it."""

    architecture: str
    baseline: str
    metric: str
    overlap_low: float | None = None
    overlap_high: float | None = None
    values: list[float] = field(default_factory=list)
    l0: list[float] = field(default_factory=list)
    l0_baseline: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    ratio_min: float | None = None
    ratio_median: float | None = None
    ratio_max: float | None = None
    value_at_min: float | None = None
    value_at_max: float | None = None
    reason: str | None = None
    # seeds (issue 45.14): the median ratio of every pairing of an architecture's seed with the baseline's, and its
    # range; the fields above are the pairing of both first seeds. Absent (None / empty) with one seed of each.
    seed_ratios: list[dict] = field(default_factory=list)
    seed_low: float | None = None
    seed_high: float | None = None
    n_seeds: int = 1
    n_baseline_seeds: int = 1


def matched_ratio(front: list[dict], base: list[dict], metric: str, architecture: str, baseline: str,
                  points: int = GRID_POINTS) -> MatchedRatio:
    """L0_arch / L0_baseline on `points` values across the fidelity range both frontiers cover."""
    out = MatchedRatio(architecture=architecture, baseline=baseline, metric=metric)
    if len(front) < 2 or len(base) < 2:
        out.reason = "fewer than two frontier points"
        return out
    lo = max(min(r[metric] for r in front), min(r[metric] for r in base))
    hi = min(max(r[metric] for r in front), max(r[metric] for r in base))
    if not lo < hi:
        out.reason = "the frontiers cover no common range"
        return out
    values = np.linspace(lo, hi, points)
    l0 = np.exp(log_l0_at(front, metric, values))
    l0_base = np.exp(log_l0_at(base, metric, values))
    ratio = l0 / l0_base
    out.overlap_low, out.overlap_high = float(lo), float(hi)
    out.values, out.l0, out.l0_baseline, out.ratio = ([float(v) for v in arr] for arr in (values, l0, l0_base, ratio))
    out.ratio_min, out.ratio_median, out.ratio_max = (float(np.min(ratio)), float(np.median(ratio)),
                                                      float(np.max(ratio)))
    out.value_at_min, out.value_at_max = float(values[np.argmin(ratio)]), float(values[np.argmax(ratio)])
    return out


@dataclass
class ParetoAnalysis(Result):
    """Each architecture's frontiers (names of the SAEs on them) and its L0 ratio to the baseline at matched
    loss recovered and at matched FVU."""

    SCHEMA: ClassVar[str] = "interpscope.sae_pareto"
    SCHEMA_VERSION: ClassVar[int] = 2  # 2: seed_ratios, seed_low / seed_high, n_seeds per ratio

    model_name: str
    hook_name: str
    baseline: str
    frontiers: dict[str, dict[str, list[str]]]
    ratios: list[MatchedRatio]
    rows: list[dict] = field(repr=False, default_factory=list)
    target_hook: str | None = None

    def ratio(self, architecture: str, metric: str = "loss_recovered") -> MatchedRatio | None:
        return next((r for r in self.ratios if r.architecture == architecture and r.metric == metric), None)

    def sentences(self, metric: str = "loss_recovered") -> list[str]:
        """One sentence per architecture, from the numbers: its L0 relative to the baseline and where."""
        label = METRICS[metric][1]
        out = []
        for r in self.ratios:
            if r.metric != metric:
                continue
            if r.ratio_median is None:
                out.append(f"{r.architecture}: no ratio to {r.baseline} at matched {label} ({r.reason}).")
                continue
            fewer = ("about as many active features as the baseline (the ratio crosses 1 in that range)"
                     if r.ratio_min is not None and r.ratio_max is not None and r.ratio_min < 1 < r.ratio_max else
                     "fewer active features" if r.ratio_median < 1 else "more active features")
            spread = (f"the ratio is {r.ratio_min:.2f} across that range" if f"{r.ratio_min:.2f}" ==
                      f"{r.ratio_max:.2f}" else f"the ratio ranges from {r.ratio_min:.2f} (at {label} "
                      f"{r.value_at_min:.3f}) to {r.ratio_max:.2f} (at {r.value_at_max:.3f})")
            seeds = seed_words(r)
            out.append(
                f"{r.architecture} needs {r.ratio_median:.2f}x the L0 of {r.baseline} at matched {label} (median "
                f"over {label} {r.overlap_low:.3f} to {r.overlap_high:.3f}, where both frontiers have SAEs): "
                f"{fewer}; {spread}; {seeds}.")
        return out

    def tidy(self) -> list[dict]:
        rows = []
        for r in self.ratios:
            for value, l0, l0b, ratio in zip(r.values, r.l0, r.l0_baseline, r.ratio, strict=True):
                rows.append({"architecture": r.architecture, "baseline": r.baseline, "metric": r.metric,
                             "value": value, "l0": l0, "l0_baseline": l0b, "ratio": ratio})
        return rows

    def payload(self) -> dict[str, Any]:
        body = super().payload()
        body.pop("rows", None)
        return body

    def figure(self):
        return pareto_figure(self.rows, self.frontiers)


def seed_words(r: MatchedRatio) -> str:
    """What the seeds say about a ratio: its range over the seed pairings, or that one seed gives no interval."""
    if len(r.seed_ratios) < 2 or r.seed_low is None or r.seed_high is None:
        return (f"one training seed of each, so no interval (the ratio's spread over seeds is unknown; a second seed "
                f"of {r.architecture} and {r.baseline} gives one)")
    return (f"over {r.n_seeds} seed(s) of {r.architecture} and {r.n_baseline_seeds} of {r.baseline} "
            f"({len(r.seed_ratios)} pairings) the median ratio spans {r.seed_low:.2f} to {r.seed_high:.2f}")


def _seed(row: dict) -> int:
    return int(row.get("seed") or 0)


def pareto_analysis(table: SweepTable, baseline: str = "relu") -> ParetoAnalysis:
    """Frontiers per architecture (of its first seed) and each one's matched-fidelity L0 ratio to `baseline` (its
    short name), with the range of that ratio over every pairing of the two architectures' seeds (rows' `seed`)."""
    by_arch: dict[str, dict[int, list[dict]]] = {}
    for row in table.rows:
        by_arch.setdefault(row["architecture"], {}).setdefault(_seed(row), []).append(row)
    first = {arch: seeds[min(seeds)] for arch, seeds in by_arch.items()}
    frontiers = {metric: {arch: [r["name"] for r in frontier(rows, metric)] for arch, rows in first.items()}
                 for metric in METRICS}
    ratios = []
    if baseline in by_arch:
        for metric in METRICS:
            base = frontier(first[baseline], metric)
            for arch, rows in first.items():
                if arch == baseline:
                    continue
                ratio = matched_ratio(frontier(rows, metric), base, metric, arch, baseline)
                ratio.n_seeds, ratio.n_baseline_seeds = len(by_arch[arch]), len(by_arch[baseline])
                for seed, arch_rows in sorted(by_arch[arch].items()):
                    for base_seed, base_rows in sorted(by_arch[baseline].items()):
                        paired = matched_ratio(frontier(arch_rows, metric), frontier(base_rows, metric), metric,
                                               arch, baseline)
                        if paired.ratio_median is not None:
                            ratio.seed_ratios.append({"seed": seed, "baseline_seed": base_seed,
                                                      "ratio_median": paired.ratio_median})
                medians = [p["ratio_median"] for p in ratio.seed_ratios]
                if len(medians) >= 2:
                    ratio.seed_low, ratio.seed_high = float(min(medians)), float(max(medians))
                ratios.append(ratio)
    return ParetoAnalysis(model_name=table.model_name, hook_name=table.hook_name, baseline=baseline,
                          frontiers=frontiers, ratios=ratios, rows=list(table.rows), target_hook=table.target_hook)
