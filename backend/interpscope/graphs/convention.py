"""circuit-tracer's convention for an attribution graph (`build_graph(..., convention="circuit-tracer")`).

Interpscope's own convention explains the raw logit with every part of the computation in a node: error nodes hold
the transcoder's decoder bias b_dec, the BOS position keeps its features and errors (never ranked), and the graph
keeps every active feature as a source. circuit-tracer 0.5.0 (circuit_tracer/attribution, graph.py) differs in four
ways, all followed here:

- the target is the *demeaned* logit, z_t - mean_v z_v (its unembedding column minus the mean column), and the
  logit nodes are the top tokens until they cover `logit_probability` (up to 10), each weighted by its raw
  probability;
- b_dec is in no node (circuit-tracer's error is mlp_out - (features + b_dec)), and the first position's features
  and errors are zeroed: its whole MLP output is in no node. So the unpruned sums do not add up to the target; the
  graph says by how much (`left_out`, computed from the same backward pass);
- features are expanded in circuit-tracer's order: all of them when the budget holds every active feature, else
  ranked by influence through the rows so far, 2,048 at a time (update_interval 4 x batch_size 512), so a budget
  of 128 is the top 128 by influence through the logit rows alone; the graph's columns are the expanded features
  only (with every error node and embedding);
- pruning by circuit-tracer's cumulative thresholds (nodes covering 0.8 of the influence, edges 0.98 of the edge
  influence, then features without an incoming or any node without an outgoing edge removed, repeatedly) instead of
  node and edge budgets.

Scores (replacement, completeness) are computed on that graph as circuit-tracer computes them.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.graphs.defaults import CONVENTIONS, CT_EDGE_THRESHOLD, CT_MAX_LOGITS, CT_NODE_THRESHOLD
from interpscope.graphs.prune import influence

NODE_THRESHOLD, EDGE_THRESHOLD, MAX_LOGITS = CT_NODE_THRESHOLD, CT_EDGE_THRESHOLD, CT_MAX_LOGITS
RANK_EVERY = 2048  # circuit-tracer re-ranks after update_interval (4) x batch_size (512) feature rows
LEFT_OUT = ("b_dec", "bos")  # the parts of Replacement.left_out, in order


def check_convention(convention: str, node_threshold: float, edge_threshold: float) -> None:
    if convention not in CONVENTIONS:
        raise InterpscopeError(f"Unknown convention {convention!r}: choose one of {', '.join(CONVENTIONS)}.")
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise InterpscopeError(f"{name} must be from 0 to 1 (got {value!r}).")


def decoder_biases(rep) -> torch.Tensor:
    """b_dec of every block's MLP output [L, d] (a per-layer set's transcoders, or a CLT's b_dec[t])."""
    parts = rep.dictionary
    originals = parts.originals
    if parts.cross_layer:
        return originals.b_dec.detach().to(rep.run.dtype)
    return torch.stack([tc.b_dec.detach().to(rep.run.dtype) for tc in originals])


def move_out_of_nodes(rep) -> None:
    """circuit-tracer's error nodes on a Replacement built with zero_positions=1: b_dec leaves every error node, the
    first position's error (its whole MLP output, less a skip) is zeroed; both go to rep.left_out."""
    b_dec = decoder_biases(rep)  # [L, d]
    L, T, d = rep.errors.shape
    left = torch.zeros(len(LEFT_OUT), L, T, d, dtype=rep.errors.dtype)
    left[0, :, 1:] = b_dec[:, None, :]
    left[1, :, 0] = rep.errors[:, 0]
    rep.errors = rep.errors - left[0] - left[1]
    rep.left_out = left


def logit_weights(entries: list[dict[str, Any]]) -> np.ndarray:
    """circuit-tracer seeds influence with each logit node's raw probability (not renormalised)."""
    weights = np.array([float(e["probability"]) for e in entries], dtype=np.float64)
    for entry, weight in zip(entries, weights, strict=True):
        entry["weight"] = float(weight)
    return weights


def expand(adj, max_feature_nodes: int, seed: np.ndarray, chunk: int, progress) -> None:
    """Feature rows in circuit-tracer's order (see the module's docstring)."""
    from interpscope.graphs.engine import feature_reads

    rep = adj.rep
    n = rep.n_features
    budget = min(max_feature_nodes, n)
    expanded = np.zeros(n, dtype=bool)
    while expanded.sum() < budget:
        room = int(budget - expanded.sum())
        if budget == n:
            pending = np.flatnonzero(~expanded)
        else:
            row_node = np.array(adj.row_node)
            weights = np.concatenate([seed, np.zeros(len(row_node) - seed.size)])
            score = influence(np.stack(adj.normalised), row_node, weights)[:n]
            rank = np.argsort(-score, kind="stable")
            pending = rank[~expanded[rank]][:min(RANK_EVERY, room)]
        expanded[pending] = True
        ordered = pending[np.lexsort((rep.features.position.numpy()[pending], rep.features.layer.numpy()[pending]))]
        for part in np.array_split(ordered, max(1, round(ordered.size / chunk))):
            adj.add(list(part), feature_reads(rep, [int(c) for c in part]))
        if progress is not None:
            progress(0.1 + 0.7 * float(expanded.sum()) / max(budget, 1),
                     f"Expanded {int(expanded.sum())} of {budget} features")


def square(A: np.ndarray, row_node: np.ndarray, n_features: int, n_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """circuit-tracer's graph: the square adjacency over [expanded features (column order), error nodes,
    embeddings, logit nodes] and the original column of each of its nodes (-1 for a logit)."""
    expanded = np.unique(row_node[row_node >= 0])
    columns = np.concatenate([expanded, np.arange(n_features, n_columns)])
    k = int((row_node < 0).sum())
    size = columns.size + k
    where = np.full(n_columns, -1)
    where[columns] = np.arange(columns.size)
    M = np.zeros((size, size), dtype=A.dtype)
    logit_rows = np.flatnonzero(row_node < 0)
    for r in range(A.shape[0]):
        target = where[row_node[r]] if row_node[r] >= 0 else columns.size + int(np.flatnonzero(logit_rows == r)[0])
        M[target, :columns.size] = A[r, columns]
    return M, np.concatenate([columns, np.full(k, -1)])


def _normalise(M: np.ndarray) -> np.ndarray:
    magnitude = np.abs(M).astype(np.float64)
    return magnitude / np.maximum(magnitude.sum(1, keepdims=True), 1e-10)


def _influence(N: np.ndarray, weights: np.ndarray) -> np.ndarray:
    current = weights @ N
    total = current.copy()
    for _ in range(1000):
        if not current.any():
            return total
        current = current @ N
        total += current
    raise RuntimeError("influence did not converge: the adjacency has a cycle")


def _threshold(scores: np.ndarray, fraction: float) -> float:
    ordered = np.sort(scores)[::-1]
    cumulative = np.cumsum(ordered) / ordered.sum()
    return float(ordered[min(int(np.searchsorted(cumulative, fraction)), ordered.size - 1)])


def prune_thresholds(M: np.ndarray, weights: np.ndarray, n_features: int, n_tokens: int, n_logits: int,
                     node_threshold: float, edge_threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """circuit-tracer's prune_graph on the square graph: (node mask, edge mask [target, source], node influence)."""
    N = _normalise(M)
    node_influence = _influence(N, weights)
    node_mask = node_influence >= _threshold(node_influence, node_threshold)
    node_mask[-n_logits - n_tokens:] = True
    pruned = np.where(node_mask[:, None] & node_mask[None, :], M, 0.0)
    P = _normalise(pruned)
    edge_scores = P * (_influence(P, weights) + weights)[:, None]
    edge_mask = edge_scores >= _threshold(edge_scores.ravel(), edge_threshold)
    sources = slice(0, M.shape[0] - n_logits - n_tokens)
    previous = None
    while previous is None or not np.array_equal(previous, node_mask):
        previous = node_mask.copy()
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        node_mask[sources] &= edge_mask[:, sources].any(0)
        node_mask[:n_features] &= edge_mask[:n_features].any(1)
    return node_mask, edge_mask, node_influence


def scores(M: np.ndarray, weights: np.ndarray, n_features: int, n_layers: int, n_tokens: int) -> tuple[float, float]:
    """circuit-tracer's compute_graph_scores on its square graph (replacement, completeness)."""
    N = _normalise(M)
    node_influence = _influence(N, weights)
    errors = slice(n_features, n_features + n_layers * n_tokens)
    tokens = slice(errors.stop, errors.stop + n_tokens)
    token_influence, error_influence = node_influence[tokens].sum(), node_influence[errors].sum()
    replacement = float(token_influence / (token_influence + error_influence))
    output = node_influence + weights
    completeness = float(((1.0 - N[:, errors].sum(1)) * output).sum() / output.sum())
    return replacement, completeness


def assemble(lm, rep, adj, seed: np.ndarray, logit_nodes: list[dict[str, Any]], text: str, set_name: str,
             node_threshold: float, edge_threshold: float, max_feature_nodes: int):
    """The pruned graph in circuit-tracer's convention (rows 0..k-1 of the adjacency are the k logit nodes). No
    position is a sink here (circuit-tracer ranks every node; the first position's are zeroed instead), so the
    document names none."""
    from interpscope.graphs.nodes import node_dict as _node
    from interpscope.graphs.result import AttributionGraph, node_id

    run = rep.run
    A, row_node = adj.matrix()
    tokens = lm.token_strings(run.ids)
    T, n, k = run.n_tokens, run.n_layers, len(logit_nodes)
    M, columns = square(A, row_node, rep.n_features, rep.n_columns)
    weights = np.zeros(M.shape[0])
    weights[-k:] = seed
    n_expanded = int(np.unique(row_node[row_node >= 0]).size)
    node_mask, edge_mask, node_influence = prune_thresholds(M, weights, n_expanded, T, k, node_threshold,
                                                           edge_threshold)
    replacement_score, completeness_score = scores(M, weights, n_expanded, n, T)
    chosen = logit_nodes[0]
    contrast_id = int(chosen["contrast"]["id"]) if "contrast" in chosen else None
    logits = run.logits.double()
    mean = float(logits.mean())

    def value_of(t: int) -> float:
        """A logit node's target: the demeaned logit (the mean cancels against a contrast)."""
        return float(logits[t]) - (float(logits[contrast_id]) if contrast_id is not None else mean)

    logit_row = A[0]
    no_sinks: set[int] = set()
    kept = np.flatnonzero(node_mask[:-k])
    nodes = [_node(rep, int(columns[i]), tokens, node_influence[i], logit_row[columns[i]], no_sinks) for i in kept]
    for node in nodes:
        if node["position"] == 0 and node["kind"] == "error":
            node["zeroed"] = True
    ids_of = {int(i): node["id"] for i, node in zip(kept, nodes, strict=True)}
    logit_ids = [node_id("logit", n, T - 1, int(e["id"])) for e in logit_nodes]
    first_logit = M.shape[0] - k
    for r, (entry, logit_id) in enumerate(zip(logit_nodes, logit_ids, strict=True)):
        node = {"id": logit_id, "kind": "logit", "layer": n, "position": T - 1, "token": entry["token"],
                "feature": int(entry["id"]), "activation": value_of(int(entry["id"])), "influence": float(seed[r]),
                "probability": float(entry["probability"]), "target": r == 0, "demeaned": contrast_id is None}
        if contrast_id is not None:
            node["token"] = f"{entry['token']} − {chosen['contrast']['token']}"
            node["contrast"] = {"token": chosen["contrast"]["token"], "id": contrast_id}
        nodes.append(node)
        ids_of[first_logit + r] = logit_id
    target_rows, source_cols = np.nonzero(edge_mask)
    edges = [{"source": ids_of[int(c)], "target": ids_of[int(t)], "weight": float(M[t, c])}
             for t, c in zip(target_rows, source_cols, strict=True) if M[t, c] != 0]
    edges.sort(key=lambda e: -abs(e["weight"]))
    left = adj.left_out[0]
    bias = adj.bias[0] + (0.0 if run.b_U is None else float(run.b_U[int(chosen["id"])]) - (
        float(run.b_U[contrast_id]) if contrast_id is not None else float(run.b_U.double().mean())))
    row_sum = float(logit_row.sum(dtype=np.float64))
    left_out = {"b_dec": float(left[0]), "bos": float(left[1]), "total": float(left.sum())}
    gap = value_of(int(chosen["id"])) - row_sum - (bias if bias else 0.0)
    what = "logit difference" if contrast_id is not None else "demeaned logit (logit - mean logit)"
    notes = [f"circuit-tracer's convention: the target is the {what} {value_of(int(chosen['id'])):.4f}; its unpruned "
             f"inputs sum to {row_sum:.4f}, {gap:+.4f} short, because b_dec (worth {left_out['b_dec']:+.4f}) and the "
             f"first position's MLP outputs (worth {left_out['bos']:+.4f}) are in no node.",
             f"Only the {n_expanded} expanded features are columns; the first position's features and errors are "
             f"zeroed; pruned at node threshold {node_threshold:g} and edge threshold "
             f"{edge_threshold:g} (circuit-tracer's prune_graph)."]
    logit_rows = []
    for r, entry in enumerate(logit_nodes):
        logit_rows.append({"token": entry["token"], "id": int(entry["id"]), "probability": float(entry["probability"]),
                           "weight": float(seed[r]), "logit": value_of(int(entry["id"])),
                           "logit_inputs_sum": float(A[r].sum(dtype=np.float64)), "node": logit_ids[r],
                           "left_out": {"b_dec": float(adj.left_out[r][0]), "bos": float(adj.left_out[r][1])}})
    return AttributionGraph(
        model=lm.name, transcoders=set_name, text=text, tokens=tokens, token_ids=[int(i) for i in run.ids],
        target={key: value for key, value in chosen.items() if key != "weight"},
        logit=value_of(int(chosen["id"])), logit_inputs_sum=row_sum, bias_sum=bias if bias else None, nodes=nodes,
        edges=edges, replacement_score=replacement_score, completeness_score=completeness_score, node_budget=0,
        edge_budget=0, max_feature_nodes=max_feature_nodes, n_active_features=rep.n_features,
        n_expanded_features=n_expanded, sinks=[], notes=notes, logits=logit_rows,
        convention="circuit-tracer", left_out=left_out,
        thresholds={"node": float(node_threshold), "edge": float(edge_threshold)})
