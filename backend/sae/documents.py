"""How an SAE's feature circuit and its evaluation read as one document: the JSON that `interpscope sae circuit
--json` / `sae eval --json`, the pages' JSON export and the Python API's `to_dict()` all give, with their tidy tables
and figures. FeatureCircuit and SAEEvaluation inherit these; figures come from interpscope.components, imported only
when asked for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.graph import GraphEdge, GraphNode


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
    conservation: Any  # a CircuitConservation or None (not imported: interpscope.sae.circuits imports this module)
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
        from interpscope.components.circuit_figures import circuit_figure

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
        from interpscope.components.sae_figures import evaluation_density_figure

        return evaluation_density_figure(self.log10_density_counts, self.log10_density_edges, self.dense_threshold,
                                         self.n_tokens, int(round(self.dead_fraction * self.d_sae)))
