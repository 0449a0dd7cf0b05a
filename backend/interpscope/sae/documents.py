"""How an SAE's feature circuit and its evaluation read as one document: the JSON that `interpscope sae circuit
--json` / `sae eval --json`, the pages' JSON export and the Python API's `to_dict()` all give, with their tidy tables
and figures. FeatureCircuit and SAEEvaluation inherit these; figures come from interpscope.figures, imported only
when asked for.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.graph import GraphEdge, GraphNode


@dataclass
class CircuitConservation:
    """Where the explained value went in the spliced pass."""

    value: float
    input_tokens: float
    upstream_features: float
    error_node: float
    sae_biases: float
    target_sae_biases: float | None  # None (absent) for a logit target: there is no target SAE
    model_biases: float | None  # None (absent) for a model with no bias and no learned position embedding
    softmax: float | None  # what the attention softmaxes drop; None (absent) where the rules send none
    relative_error: float


class CircuitDocument(Result):
    """A feature circuit (the SAE page's Circuit view, `interpscope sae circuit`, `interpscope.sae.circuit`).

    Document: model, method, target, explained value, upstream hook, tokens, the upstream feature nodes
    (`top_features`: relevance summed over positions and the strongest position), where the value went
    (`conservation`), the graph's nodes and edges, seconds. The [T, d_sae] relevance matrix stays on the object."""

    SCHEMA = "interpscope.sae.circuit"
    SCHEMA_VERSION = 1

    # the fields this document reads; FeatureCircuit (a dataclass) defines them
    model: str
    method: str
    tokens: list[str]
    target: str
    value: float
    upstream_hook: str
    conservation: CircuitConservation | None
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    seconds: float

    def top_features(self, k: int = 10) -> list[dict]:
        """The upstream features with the largest |relevance| summed over positions (FeatureCircuit)."""
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        n_features = sum(1 for node in self.nodes if node.kind == "feature")
        return to_plain({"model": self.model, "method": self.method, "target": self.target, "value": self.value,
                         "upstream_hook": self.upstream_hook, "tokens": self.tokens,
                         "top_features": self.top_features(n_features), "conservation": self.conservation,
                         "nodes": self.nodes, "edges": self.edges, "seconds": self.seconds})

    def figure(self):
        from interpscope.figures.sae import circuit_figure

        return circuit_figure(self.nodes, self.edges, f"Strongest edges into {self.target} ({self.upstream_hook})")


class EvaluationDocument(Result):
    """One SAE's evaluation (the SAE overview page, `interpscope sae eval`, `interpscope.sae.evaluate`).

    Document: the scalar figures (`summary()`) and the log10 density histogram; the per-feature density is the
    tidy table (one row per feature)."""

    SCHEMA = "interpscope.sae.evaluation"
    SCHEMA_VERSION = 1

    # the fields this document reads; SAEEvaluation (a dataclass) defines them
    d_sae: int
    n_tokens: int
    dead_fraction: float
    dense_threshold: float
    density: np.ndarray
    log10_density_counts: np.ndarray
    log10_density_edges: np.ndarray

    def summary(self) -> dict:
        """The scalar figures (SAEEvaluation)."""
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        return to_plain({**self.summary(), "log10_density_histogram": {"counts": self.log10_density_counts,
                                                                         "edges": self.log10_density_edges}})

    def tidy(self) -> list[dict]:
        return [{"feature": i, "density": float(d)} for i, d in enumerate(self.density)]

    def figure(self):
        from interpscope.figures.sae import evaluation_density_figure

        return evaluation_density_figure(self.log10_density_counts, self.log10_density_edges, self.dense_threshold,
                                         self.n_tokens, int(round(self.dead_fraction * self.d_sae)))


@dataclass
class TrainingReport(Result):
    """A training run's report (the SAE training page's final report, `interpscope sae train`'s JSON): where each
    SAE was saved, its evaluation on held-out tokens (absent when none was asked for) and its logged curves.

    `saved`: SAE name -> folder; `eval`: name -> the evaluation's scalar figures (SAEEvaluation.summary());
    `histories`: name -> the logged training entries (tokens, loss, L0, FVU, ...), read from each folder's
    history.json (the curves the page draws)."""

    model: str
    hook: str
    saved: dict[str, str]
    histories: dict[str, list[dict]]
    eval: dict[str, dict] | None = None

    SCHEMA = "interpscope.sae.training"
    SCHEMA_VERSION = 1
    TIMING_KEYS = ("seconds",)

    def tidy(self) -> list[dict]:
        """One row per SAE: its folder and evaluation figures."""
        return [{"sae": name, "folder": folder, **{k: v for k, v in (self.eval or {}).get(name, {}).items()
                                                   if not isinstance(v, (dict, list))}}
                for name, folder in self.saved.items()]

    def figure(self):
        from interpscope.figures.sae import training_curves_figure

        return training_curves_figure(self.histories)


def training_report(model: str, hook: str, saved: Mapping[str, str | Path],
                    evaluations: dict[str, dict] | None = None) -> TrainingReport:
    """The report of a finished run from its saved folders (each folder's history.json holds its curves)."""
    histories = {}
    for name, folder in saved.items():
        history = Path(folder) / "history.json"
        histories[name] = json.loads(history.read_text(encoding="utf-8")) if history.is_file() else []
    return TrainingReport(model=model, hook=hook, saved={name: str(folder) for name, folder in saved.items()},
                          histories=histories, eval=evaluations or None)
