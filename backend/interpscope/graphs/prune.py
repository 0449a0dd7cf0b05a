"""Influence, pruning and graph scores as circuit-tracer defines them (Ameisen et al. 2025; circuit_tracer/graph.py).

The adjacency A holds one row per computed target (the logit(s) and the expanded features) and one column per node
(every active feature, every error node, every embedding). |A| is normalised so each row sums to 1; a node's
influence on the logit is the logit-weighted sum over paths, w (|A| + |A|^2 + ...), i.e. the logit row of
(I - |A|)^-1 - I, computed by matrix-vector products until nothing is left (the graph is acyclic: a feature reads
only from lower blocks, so at most n_layers + 1 products). Rows are only known for expanded features: influence
that reaches an unexpanded feature stops there (its outgoing edges are known, its incoming ones are not).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def normalised(weights: np.ndarray) -> np.ndarray:
    """|A| with every row scaled to sum 1 (all-zero rows stay zero), in A's float precision."""
    magnitude = np.abs(weights)
    total = magnitude.sum(1, keepdims=True, dtype=np.float64).astype(magnitude.dtype)
    return np.divide(magnitude, total, out=np.zeros_like(magnitude), where=total > 0)


def influence(A: np.ndarray, row_node: np.ndarray, seed: np.ndarray, max_steps: int = 1000) -> np.ndarray:
    """Influence [n_columns] of every node: seed [R] weights the rows (the logit's weight on logit rows, 0 on
    feature rows); row_node [R] is the column of each row's own node (-1 for a logit). A is normalised.

    The path sum runs over the rows only (R x R: the weight reaching each computed target), then one product with
    A spreads it over every column: (seed + w_1 + w_2 + ...) A with w_{k+1} = (w_k A) at the rows' own columns."""
    has_node = row_node >= 0
    among_rows = np.zeros((A.shape[0], A.shape[0]), dtype=np.float64)
    among_rows[:, has_node] = A[:, row_node[has_node]]
    weight = seed.astype(np.float64)
    reached = weight.copy()
    for _ in range(max_steps):
        weight = weight @ among_rows
        if not weight.any():
            return (reached.astype(A.dtype) @ A).astype(np.float64)
        reached += weight
    raise RuntimeError("influence did not converge: the adjacency has a cycle")


@dataclass
class Scores:
    replacement: float
    completeness: float


def graph_scores(A: np.ndarray, row_node: np.ndarray, seed: np.ndarray, error_columns: np.ndarray,
                 embedding_columns: np.ndarray) -> Scores:
    """circuit-tracer's two scores, on the graph circuit-tracer would keep (the expanded features, every error
    node, every embedding, the logit(s): unexpanded features are dropped from the columns, as circuit-tracer keeps
    only its selected features).

    replacement score = influence(embeddings) / (influence(embeddings) + influence(errors)): the share of the
    end-to-end influence on the logit that starts at the input rather than at an error node.
    completeness score = sum over nodes of (1 - the share of the node's normalised incoming weight from error
    nodes) x (its influence + its logit weight), divided by the sum of (influence + logit weight): nodes without
    computed inputs (errors, embeddings) count as complete, as in circuit-tracer."""
    keep = np.concatenate([np.unique(row_node[row_node >= 0]), error_columns, embedding_columns])
    keep = np.unique(keep)
    position = np.full(A.shape[1], -1)
    position[keep] = np.arange(keep.size)
    sub = normalised(A[:, keep])
    rows = np.where(row_node >= 0, position[np.maximum(row_node, 0)], -1)
    node_influence = influence(sub, rows, seed)
    errors, embeds = position[error_columns], position[embedding_columns]
    error_influence, token_influence = node_influence[errors].sum(), node_influence[embeds].sum()
    denominator = token_influence + error_influence
    replacement = float(token_influence / denominator) if denominator > 0 else float("nan")
    error_share = sub[:, errors].sum(1)
    is_logit = rows < 0
    non_error = np.ones(keep.size)
    non_error[rows[~is_logit]] = 1.0 - error_share[~is_logit]
    weighted = (non_error * node_influence).sum() + ((1.0 - error_share[is_logit]) * seed[is_logit]).sum()
    total = node_influence.sum() + seed[is_logit].sum()
    completeness = float(weighted / total) if total > 0 else float("nan")
    return Scores(replacement, completeness)


@dataclass
class Pruned:
    nodes: np.ndarray  # kept columns (features and error nodes by influence, every embedding)
    edges: list[tuple[int, int, float]]  # (row, column, weight) kept
    influence: np.ndarray  # [n_columns] influence on the logit in the unpruned graph


def prune(A_raw: np.ndarray, row_node: np.ndarray, seed: np.ndarray, ranked: np.ndarray, always: np.ndarray,
          node_budget: int, edge_budget: int) -> Pruned:
    """Keep the `node_budget` most influential nodes among `ranked` (columns that may be ranked: features and error
    nodes off the sink positions), plus `always` (the embeddings), and the `edge_budget` strongest edges between
    kept nodes by edge influence (normalised |weight| x (the target's influence + its logit weight), on the graph
    restricted to the kept nodes); then drop kept features and errors left with no kept outgoing edge."""
    A = normalised(A_raw)
    node_influence = influence(A, row_node, seed)
    order = ranked[np.argsort(-node_influence[ranked], kind="stable")]
    chosen = order[node_influence[order] > 0][:node_budget]
    kept = np.zeros(A.shape[1], dtype=bool)
    kept[chosen] = True
    kept[always] = True
    rows_kept = (row_node < 0) | kept[np.maximum(row_node, 0)]
    masked = np.where(rows_kept[:, None] & kept[None, :], A_raw, 0.0)
    sub = normalised(masked)
    target_influence = influence(sub, row_node, seed)
    row_weight = np.where(row_node >= 0, target_influence[np.maximum(row_node, 0)], 0.0) + seed
    scores = sub * row_weight[:, None]
    flat = np.flatnonzero(scores > 0)
    best = flat[np.argsort(-scores.ravel()[flat], kind="stable")[:edge_budget]]
    r_idx, c_idx = np.unravel_index(best, scores.shape)
    edges = [(int(r), int(c), float(A_raw[r, c])) for r, c in zip(r_idx, c_idx, strict=True)]
    with_out = np.zeros(A.shape[1], dtype=bool)
    with_out[[c for _, c, _ in edges]] = True
    final = np.flatnonzero(kept & (with_out | np.isin(np.arange(A.shape[1]), always)))
    alive = np.zeros(A.shape[1], dtype=bool)
    alive[final] = True
    edges = [e for e in edges if alive[e[1]] and (row_node[e[0]] < 0 or alive[row_node[e[0]]])]
    return Pruned(final, edges, node_influence)
