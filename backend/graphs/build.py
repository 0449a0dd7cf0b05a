"""build_graph: the public entry point (one real forward pass, the linear replay, expansion, pruning, LRP)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interpscope.graphs.result import AttributionGraph
    from interpscope.models.loaded import LoadedModel

DEFAULT_NODE_BUDGET = 80
DEFAULT_EDGE_BUDGET = 400
DEFAULT_MAX_FEATURE_NODES = 2000
MAX_TOKENS = 128


def build_graph(lm: LoadedModel, transcoders: Any, text: str, *, target: str | int | None = None,
                node_budget: int = DEFAULT_NODE_BUDGET, edge_budget: int = DEFAULT_EDGE_BUDGET,
                max_feature_nodes: int = DEFAULT_MAX_FEATURE_NODES, lrp: str | None = "attnlrp",
                progress: Callable[[float, str], None] | None = None) -> AttributionGraph:
    """The attribution graph of `text`'s next-token `target` (a token string or id; None: the top next token)."""
    raise NotImplementedError("being written (H2)")
