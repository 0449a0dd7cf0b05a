"""Nodes and edges of the relevance graphs (information flow, feature circuits): plain data for figures and JSON."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GraphNode:
    """A token, a head, an MLP, an SAE feature, an error term or the explained target.

    layer: the block it sits in (heads, MLPs); index: a head's index or a feature's id; position: a token position
    (for a feature: the position where its relevance is largest)."""

    id: str
    kind: str
    label: str
    relevance: float
    layer: int | None = None
    index: int | None = None
    position: int | None = None


@dataclass
class GraphEdge:
    """Relevance flowing from `source` to `target` (signed: positive speaks for the target)."""

    source: str
    target: str
    relevance: float
