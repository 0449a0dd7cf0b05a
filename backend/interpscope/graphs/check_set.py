"""The graph's ablation check over a set of prompts (issue 45.15): one prompt's r says how well one graph predicts
its own ablations; whether graphs of this model and these transcoders predict ablations at all needs many prompts, the
mean r with its spread, and the random-feature control beside it on the same prompts.

Each prompt gets its own graph (build_graph with the given budgets) and its own check (ablation_check: the n strongest
feature nodes ablated one by one in real forward passes, predicted vs actual logit change, and n random active
features as the control). Per prompt the row keeps r, r_control, r_linear and the count of last-block rows (exact by
construction); over the prompts: the mean of each r with a seeded 95% bootstrap interval and the standard deviation.
A prompt whose r is undefined (fewer than three ablations, or a constant side) is kept, named, and left out of the
means.

Schema interpscope.graph.ablation_check_set: `interpscope graphs --texts FILE --ablation-check N --json` and
`interpscope.graphs.ablation_check_set(...)`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MAX_TEXTS = 50
FIGURES = ("r", "r_control", "r_linear", "r_pruned", "r_frozen_linear", "r_real_linear")
SCORES = ("replacement_score", "completeness_score")  # each prompt's graph's, averaged like the r's
POOLED = {"r": "predicted", "r_frozen_linear": "predicted_frozen_linear", "r_real_linear": "predicted_real_linear"}


@dataclass
class AblationCheckSet(Result):
    """Per-prompt ablation checks and their means (see the module docstring)."""

    SCHEMA = "interpscope.graph.ablation_check_set"
    # 2: the frozen-convention ceiling and the real linearisation per prompt (r_frozen_linear, r_real_linear), each
    # prompt's strongest changes and their pooled r's (pooled), each graph's replacement and completeness scores
    SCHEMA_VERSION = 2

    model: str
    n: int
    rows: list[dict[str, Any]]
    means: dict[str, dict[str, float]] = field(default_factory=dict)
    pooled: dict[str, float] = field(default_factory=dict)
    target_r: float = 0.8
    seed: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """The sentence of the means, computed from them: the graphs' r beside the random control's."""
        r, control = self.means.get("r"), self.means.get("r_control")
        if r is None:
            return (f"No prompt of {len(self.rows)} gave a defined r (each needs three ablations with changes on both "
                    "sides).")
        undefined = len(self.rows) - int(r["n"])
        text = (f"Over {int(r['n'])} prompts the graphs' predictions of their {self.n} strongest ablations reach mean "
                f"r = {r['mean']:.2f} [{r['low']:.2f}, {r['high']:.2f}] (sd {r['sd']:.2f})")
        if control is not None:
            apart = r["low"] > control["high"]
            text += (f", against {control['mean']:.2f} [{control['low']:.2f}, {control['high']:.2f}] for random active "
                     f"features: {'clearly above the control' if apart else 'not separated from the control'}")
        text += f"; the target was r >= {self.target_r:g} per prompt, met on {self.n_met()} of {int(r['n'])}"
        if undefined:
            text += f"; {undefined} prompt(s) gave no r"
        return text + "." + self._pooled_said()

    def _pooled_said(self) -> str:
        """Pooled over every prompt's strongest ablations: the graph's r beside the frozen-convention ceiling."""
        r, ceiling, real = (self.pooled.get(k) for k in ("r", "r_frozen_linear", "r_real_linear"))
        if r is None or ceiling is None:
            return ""
        gap = ceiling - r
        text = (f" Pooled over all {int(self.pooled.get('n', 0))} strongest ablations, the graphs reach r = {r:.2f}; "
                f"the real model linearised under the same frozen convention with its real MLPs (the ceiling for any "
                f"transcoders) reaches r = {ceiling:.2f}, so the graphs are {abs(gap):.2f} "
                f"{'below' if gap > 0 else 'above'} it ({'within' if gap <= 0.1 else 'more than'} 0.1)")
        if real is not None:
            text += f"; the unconstrained real linearisation reaches r = {real:.2f}"
        return text + "."

    def n_met(self) -> int:
        return sum(1 for row in self.rows if row.get("r") is not None and row["r"] >= self.target_r)

    def tidy(self) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "changes"} for row in self.rows]


def _mean(values: Sequence[float], seed: int) -> dict[str, float] | None:
    from interpscope.relevance.heldout_stats import bootstrap_mean

    data = [float(v) for v in values if v is not None and np.isfinite(v)]
    if not data:
        return None
    mean, low, high = bootstrap_mean(data, seed=seed) if len(data) > 1 else (data[0], data[0], data[0])
    return {"mean": mean, "low": low, "high": high, "sd": float(np.std(data, ddof=1)) if len(data) > 1 else 0.0,
            "n": float(len(data))}


def ablation_check_set(lm: LoadedModel, transcoders: Any, texts: Sequence[str], n: int = 20, *, seed: int = 0,
                       graph_options: dict[str, Any] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> AblationCheckSet:
    """Build each text's graph and run its ablation check; progress(done, total) counts prompts."""
    import time

    from interpscope.graphs.build import build_graph
    from interpscope.graphs.interventions import ablation_check
    from interpscope.inputs import check_text

    texts = [check_text(t) for t in texts]
    if not texts:
        raise InterpscopeError("Give at least one prompt for the ablation check.")
    if len(texts) > MAX_TEXTS:
        raise InterpscopeError(f"{len(texts)} prompts; at most {MAX_TEXTS} run at once (each builds a graph).")
    started = time.perf_counter()
    rows = []
    for index, text in enumerate(texts):
        graph = build_graph(lm, transcoders, text, **(graph_options or {}))
        check = ablation_check(lm, transcoders, graph, n=n, seed=seed)
        strongest = [r for r in check.rows if r.get("set") == "strongest"]
        rows.append({"text": text, "target": graph.target.get("token"), **{k: getattr(check, k) for k in FIGURES},
                     "replacement_score": graph.replacement_score, "completeness_score": graph.completeness_score,
                     "n_last_layer": check.n_last_layer, "ablations": len(strongest),
                     "changes": [{"actual": r["actual"], **{v: r[v] for v in POOLED.values()}} for r in strongest]})
        if progress is not None:
            progress(index + 1, len(texts))
    means = {k: m for k in (*FIGURES, *SCORES)
             if (m := _mean([row[k] for row in rows if row.get(k) is not None], seed)) is not None}
    return AblationCheckSet(model=lm.name, n=n, rows=rows, means=means, pooled=_pooled(rows), seed=seed,
                            seconds=time.perf_counter() - started)


def _pooled(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Pearson r of each prediction against the real change over every prompt's strongest ablations together."""
    from interpscope.graphs.interventions import pearson

    changes = [c for row in rows for c in row.get("changes", [])]
    pooled: dict[str, float] = {"n": float(len(changes))}
    for name, key in POOLED.items():
        r = pearson([c[key] for c in changes], [c["actual"] for c in changes])
        if r is not None:
            pooled[name] = r
    return pooled
