"""The patching result (schema interpscope.patching): grids normalised so 1 = the clean metric, 0 = the corrupt one."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interpscope.patching.patching import KIND_LABELS
from interpscope.results import Result, to_plain


@dataclass(kw_only=True)
class PairResult(Result):
    """What every causal result holds about its prompt pair: the model, both prompts, their tokens and ids, the
    metric (kind, label, answer and wrong tokens) with its clean and corrupt values, the excluded positions."""

    model: str
    clean: str
    corrupt: str
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    clean_ids: list[int]
    corrupt_ids: list[int]
    metric: str
    metric_label: str
    answer: str
    answer_id: int
    clean_value: float
    corrupt_value: float
    wrong: str | None = None
    wrong_id: int | None = None
    sinks: list[dict] = field(default_factory=list)
    bos_prepended: bool = False


def best_cell(grid: np.ndarray, kind: str, excluded: list[int]) -> tuple[int, int, float] | None:
    """(row, column, value) of the grid's largest cell, the excluded positions' columns never ranked (heads have no
    position columns); None when nothing is left to rank. Shared by one pair's grids and a set's mean grids."""
    values = np.array(grid, dtype=float)
    if kind != "heads":
        values[:, [p for p in excluded if p < values.shape[1]]] = -np.inf
    if not np.isfinite(values).any():
        return None
    row, column = np.unravel_index(int(np.argmax(values)), values.shape)
    return int(row), int(column), float(values[row, column])


@dataclass(kw_only=True)
class PatchingResult(PairResult):
    """Activation patching of one prompt pair, with its approximations beside it.

    The document (`interpscope patch --json`, the page's export, `to_dict()`): the model, both prompts and their
    tokens, the metric (kind, answer and wrong tokens, clean and corrupt values), and per component kind
    (`grids[kind]`): the row and column labels, which cells the patch changes (`changed`: cells whose clean and
    corrupt activations are identical patch nothing and are 0 for every method), and one grid per method ('real',
    'atp', 'relp') of normalised effects, (patched - corrupt) / (clean - corrupt): 1 = the clean metric restored,
    0 = no change, negative = further from clean. `agreement[kind]` is each approximation's Pearson r with real
    patching over the changed cells (absent where real patching or the approximation was not run), beside its control
    `chance_r95` (the 95th percentile of |r| against the real values shuffled over those cells). Measured
    attention sinks and a prepended BOS are named in `sinks`; they are never ranked (`summary`)."""

    SCHEMA = "interpscope.patching"
    SCHEMA_VERSION = 1

    methods: list[str]
    components: list[str]
    grids: dict[str, dict[str, Any]]
    relp_rules: str | None = None
    agreement: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        plain = to_plain(self)
        plain["summary"] = self.summary()
        return plain

    @property
    def excluded(self) -> list[int]:
        """Positions never ranked: measured sinks and a prepended BOS."""
        return [int(row["position"]) for row in self.sinks]

    def grid(self, kind: str, method: str) -> np.ndarray:
        return np.asarray(self.grids[kind][method], dtype=float)

    def position_label(self, position: int) -> str:
        """'3: ' Mary'' or, where the prompts differ there, '3: ' Mary'→' John'' (clean→corrupt)."""
        clean, corrupt = self.clean_tokens[position], self.corrupt_tokens[position]
        return f"{position}: {clean!r}" + ("" if clean == corrupt else f"→{corrupt!r}")

    def best(self, kind: str, method: str = "real") -> tuple[int, int, float] | None:
        """(row, column, value) of the cell restoring most of the clean metric, sink positions never ranked; None when
        nothing is left to rank."""
        if kind not in self.grids or method not in self.grids[kind]:
            return None
        return best_cell(self.grid(kind, method), kind, self.excluded)

    def cell_label(self, kind: str, row: int, column: int) -> str:
        if kind == "heads":
            return f"head L{row}.H{column} (all positions)"
        where = "the final residual" if kind == "resid" and row == len(self.grids[kind]["rows"]) - 1 else \
            f"layer {row}"
        return f"{where}, position {self.position_label(column)}"

    def summary(self) -> list[str]:
        """One sentence per component kind, computed from the grids: which cell restores most, and how well each
        approximation tracks real patching."""
        method = "real" if "real" in self.methods else self.methods[0]
        out = []
        for kind in self.components:
            best = self.best(kind, method)
            if best is None:
                continue
            row, column, value = best
            text = (f"{KIND_LABELS[kind]}: patching {self.cell_label(kind, row, column)} restores {value:.0%} of the "
                    f"way from the corrupt to the clean {self.metric_label}"
                    + ("" if method == "real" else f" ({method} estimate)"))
            scores = self.agreement.get(kind, {})
            rs = [f"{name} r = {scores[name]:.2f}" for name in ("atp", "relp") if scores.get(name) is not None]
            chance = scores.get("chance_r95")
            control = f" (chance: |r| < {chance:.2f} for 95% of shuffles)" if chance is not None else ""
            out.append(text + (f"; against real patching {', '.join(rs)} over {scores['cells']} cells{control}"
                               if rs else "") + ".")
        return out

    def tidy(self) -> list[dict]:
        """One row per (component kind, row, column) with each method's normalised effect."""
        rows = []
        for kind in self.components:
            block = self.grids[kind]
            for r, row_label in enumerate(block["rows"]):
                for c, column_label in enumerate(block["columns"]):
                    entry: dict[str, Any] = {"component": kind, "row": row_label, "column": column_label,
                                             "changed": bool(block["changed"][r][c])}
                    for method in self.methods:
                        entry[method] = float(np.asarray(block[method])[r, c])
                    rows.append(entry)
        return rows

    def figure(self):
        """The page's heatmaps: one row per component kind, one column per method, Pearson r in the titles."""
        from interpscope.figures.patching import heatmaps_figure

        return heatmaps_figure(self)

    def scatter_figure(self):
        """Each approximation against real patching, every changed cell a point, per component kind."""
        from interpscope.figures.patching import scatter_figure

        return scatter_figure(self)


PATH_NOISE = 0.02  # |normalised total effect| below this: within the metric's noise, a ratio over it is undefined


@dataclass(kw_only=True)
class PathPatchingResult(PairResult):
    """Path patching of one prompt pair (schema interpscope.path_patching): the sender's clean output allowed to reach
    the receiver only (`path_effect`, normalised: 1 = clean, 0 = corrupt; `path_metric` raw), beside the sender's total
    effect when patched with nothing frozen (`total_effect`, `total_metric`), its control."""

    SCHEMA = "interpscope.path_patching"
    SCHEMA_VERSION = 1

    sender: str
    receiver: str
    path_effect: float
    path_metric: float
    total_effect: float
    total_metric: float
    seconds: float = 0.0

    def payload(self) -> dict[str, Any]:
        plain = to_plain(self)
        plain["summary"] = self.summary()
        return plain

    def summary(self) -> str:
        """The sentence the page and the command line show, from the two numbers."""
        opening = (f"Through the path {self.sender} → {self.receiver} alone, the sender's clean output restores "
                   f"{self.path_effect:.1%} of the clean {self.metric_label}; patched everywhere it restores "
                   f"{self.total_effect:.1%}")
        if abs(self.total_effect) < PATH_NOISE:  # a ratio over a total inside the noise says nothing (issue 45.9)
            return (f"{opening}. The total is within ±{PATH_NOISE:.0%} of no effect, so the share of it that goes "
                    f"through this path is undefined: this sender barely matters here.")
        return f"{opening} ({self.path_effect / self.total_effect:.0%} of its total effect goes through this path)."

    def tidy(self) -> list[dict]:
        return [{"sender": self.sender, "receiver": self.receiver, "effect": "path", "normalised": self.path_effect,
                 "metric": self.path_metric},
                {"sender": self.sender, "receiver": self.receiver, "effect": "total", "normalised": self.total_effect,
                 "metric": self.total_metric}]

    def figure(self):
        from interpscope.figures.patching import path_figure

        return path_figure(self)
