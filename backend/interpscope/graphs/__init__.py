"""Attribution graphs over per-layer transcoders: which features, at which layers and positions, produce a logit.

    graph = interpscope.graphs.build_graph(lm, transcoders, "The capital of France is", node_budget=60)
    graph.to_dict()           # schema interpscope.graph (= `interpscope graph --json` and the page's export)
    graph.to_neuronpedia()    # circuit-tracer / Neuronpedia graph JSON, where it maps

The replacement model (transcoders in place of MLPs, attention patterns and norm scales frozen from the real run,
an error node per layer and position) is linear downstream of the residual stream, so its edges are exact direct
effects; see interpscope.graphs.engine. Names load on first use (PEP 562).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from interpscope.lazy import lazy_names

_LAZY = {
    "build_graph": "interpscope.graphs.build",
    "AttributionGraph": "interpscope.graphs.result",
    "ablation_check_set": "interpscope.graphs.check_set",
    "AblationCheckSet": "interpscope.graphs.check_set",
}

__all__ = ["AblationCheckSet", "AttributionGraph", "ablation_check_set", "build_graph"]

if TYPE_CHECKING:
    from interpscope.graphs.build import build_graph
    from interpscope.graphs.check_set import AblationCheckSet, ablation_check_set
    from interpscope.graphs.result import AttributionGraph

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
