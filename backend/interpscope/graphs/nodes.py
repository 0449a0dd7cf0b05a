"""One node of a built graph as the document writes it (shared by both conventions' assembly)."""
from __future__ import annotations

from typing import Any

from interpscope.graphs.engine import Replacement
from interpscope.graphs.result import node_id


def node_dict(rep: Replacement, column: int, tokens: list[str], value: float, direct: float,
              sinks: set[int]) -> dict[str, Any]:
    feats, run = rep.features, rep.run
    if column < rep.n_features:
        layer, position = int(feats.layer[column]), int(feats.position[column])
        feature = int(feats.feature[column])
        node = {"id": node_id("feature", layer, position, feature), "kind": "feature", "layer": layer,
                "position": position, "token": tokens[position], "feature": feature,
                "activation": float(feats.activation[column])}
    elif column < rep.embedding_column(0):
        layer, position = divmod(column - rep.n_features, run.n_tokens)
        node = {"id": node_id("error", layer, position), "kind": "error", "layer": layer, "position": position,
                "token": tokens[position], "activation": float(rep.errors[layer, position].norm())}
    else:
        position = column - rep.embedding_column(0)
        node = {"id": node_id("embedding", None, position), "kind": "embedding", "layer": -1,
                "position": position, "token": tokens[position]}
    node["influence"] = float(value)
    node["logit_effect"] = float(direct)
    if node["position"] in sinks:
        node["sink"] = True
    return node
