"""An AttributionGraph in circuit-tracer's / Neuronpedia's graph JSON (circuit_tracer/frontend/graph_models.py), where
it maps.

Maps: metadata {slug, scan, transcoder_list, prompt_tokens, prompt, schema_version}; nodes {node_id, jsNodeId,
feature, layer, ctx_idx, feature_type, influence, activation, clerp, token_prob, is_target_logit}; links {source,
target, weight}; qParams (empty selections). Node ids follow circuit-tracer: features `{layer}_{feature}_{pos}`,
errors `{layer}_-1_{pos}` (feature -1), embeddings `E_{token id}_{pos}` (feature = pos, layer "E"), the logit
`{n_layers + 1}_{token id}_{pos}` (feature = token id).

What does not map: circuit-tracer's `feature` of a feature node is a cantor pairing of (layer, index) for its
cross-layer transcoders; per-layer transcoders keep the plain index here (Neuronpedia will not find the feature
without a published scan of these transcoders). `influence` there is the cumulative share of influence up to the
node in descending order (circuit-tracer's prune_graph); here it is that cumulative share too, computed from our
node influences over the kept nodes. Our LRP edges, agreement, sink flags, scores and logit_effect have no place in
the format and are left out (they stay in the interpscope.graph document); `node_threshold` is absent (we prune to
budgets, not to an influence share).
"""
from __future__ import annotations

from typing import Any

_TYPES = {"feature": "cross layer transcoder", "error": "mlp reconstruction error", "embedding": "embedding",
          "logit": "logit"}


def _np_id(node: dict[str, Any], token_ids: list[int]) -> tuple[str, str, int, str]:
    """(node_id, jsNodeId, feature, layer) as circuit-tracer writes them."""
    kind, position, layer = node["kind"], int(node["position"]), node["layer"]
    if kind == "feature":
        return f"{layer}_{node['feature']}_{position}", f"{layer}_{node['feature']}-0", int(node["feature"]), str(layer)
    if kind == "error":
        return f"{layer}_-1_{position}", f"{layer}_-1-{position}", -1, str(layer)
    if kind == "embedding":
        vocab = token_ids[position] if position < len(token_ids) else position
        return f"E_{vocab}_{position}", f"E_{vocab}-{position}", position, "E"
    top = str(int(layer) + 1)
    return f"{top}_{node['feature']}_{position}", f"L_{node['feature']}-{position}", int(node["feature"]), top


def to_neuronpedia(graph: Any, slug: str | None = None) -> dict[str, Any]:
    """An AttributionGraph (interpscope.graphs.result; not imported here: the result imports this module) as a
    circuit-tracer / Neuronpedia graph document (see the module's note on what does not map)."""
    ranked = sorted((n for n in graph.nodes if n["kind"] != "logit"), key=lambda n: -float(n.get("influence") or 0))
    total = sum(max(float(n.get("influence") or 0), 0.0) for n in ranked) or 1.0
    cumulative, running = {}, 0.0
    for node in ranked:
        running += max(float(node.get("influence") or 0), 0.0)
        cumulative[node["id"]] = running / total
    ids: dict[str, str] = {}
    nodes = []
    for node in graph.nodes:
        node_id, js_id, feature, layer = _np_id(node, list(graph.token_ids))
        ids[node["id"]] = node_id
        entry: dict[str, Any] = {"node_id": node_id, "jsNodeId": js_id, "feature": feature, "layer": layer,
                                 "ctx_idx": int(node["position"]), "feature_type": _TYPES[node["kind"]],
                                 "reverse_ctx_idx": 0, "run_idx": 0, "clerp": ""}
        if node["kind"] == "logit":  # one node: the target; more (top logits): each its own probability
            is_target = bool(node.get("target", True))
            probability = float(node.get("probability", graph.target.get("probability", 0.0)))
            entry.update(token_prob=probability, is_target_logit=is_target,
                         clerp=f'Output "{node.get("token", "")}" (p={probability:.3f})')
        else:
            entry.update(token_prob=0.0, is_target_logit=False, influence=cumulative.get(node["id"]))
            if node["kind"] == "feature":
                entry["activation"] = node.get("activation")
        nodes.append(entry)
    links = [{"source": ids[e["source"]], "target": ids[e["target"]], "weight": e["weight"]} for e in graph.edges]
    metadata = {"slug": slug or "interpscope-graph", "scan": graph.transcoders, "transcoder_list": [],
                "prompt_tokens": list(graph.tokens), "prompt": graph.text, "schema_version": 1,
                "info": {"generator": "interpscope", "model": graph.model,
                         "replacement_score": graph.replacement_score,
                         "completeness_score": graph.completeness_score}}
    q_params = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": metadata, "qParams": q_params, "nodes": nodes, "links": links}
