"""Supernodes of an attribution graph: feature nodes grouped automatically (by decoder direction, or by the top
contexts a feature store holds) or by hand (a node selection), each with a label computed from its members, and
the graph's edges summed over the groups.

Decoder grouping is agglomerative clustering with average linkage on the cosine of the features' decoder rows
(W_dec[f] of the node's layer, the direction the feature writes into the residual stream): two groups merge while
the mean cosine between their members is at least the user's threshold. Context grouping is the same clustering on
the Jaccard overlap of the members' top-context tokens. Plain data in (node dicts as the graph stores them), plain
data out: cheap enough to rerun on every click (a few hundred nodes: milliseconds).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from interpscope.config import InterpscopeError


@dataclass
class Supernode:
    """A named group of feature nodes: `members` are node ids of the graph; `how` says how it was formed."""

    id: str
    members: list[str]
    label: str
    how: str
    layers: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


def feature_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [n for n in nodes if n.get("kind") == "feature"]


def agglomerate(similarity: np.ndarray, threshold: float) -> list[list[int]]:
    """Average-linkage agglomerative clustering: repeatedly merge the two clusters with the highest mean pairwise
    similarity while it is >= threshold. Returns clusters (lists of row indices), each sorted, largest first."""
    n = similarity.shape[0]
    clusters: list[list[int]] = [[i] for i in range(n)]
    if n < 2:
        return clusters
    sim = similarity.astype(np.float64).copy()
    np.fill_diagonal(sim, -np.inf)
    sizes = np.ones(n)
    alive = np.ones(n, dtype=bool)
    while True:
        masked = np.where(alive[:, None] & alive[None, :], sim, -np.inf)
        flat = int(np.argmax(masked))
        i, j = divmod(flat, n)
        if not np.isfinite(masked[i, j]) or masked[i, j] < threshold:
            break
        # Lance-Williams update for average linkage: the merged cluster's mean similarity to every other cluster
        merged = (sizes[i] * sim[i] + sizes[j] * sim[j]) / (sizes[i] + sizes[j])
        sim[i, :], sim[:, i] = merged, merged
        sim[i, i] = -np.inf
        sizes[i] += sizes[j]
        alive[j] = False
        clusters[i] = sorted(clusters[i] + clusters[j])
        clusters[j] = []
    return sorted((c for c, a in zip(clusters, alive, strict=True) if a), key=lambda c: (-len(c), c[0]))


def decoder_directions(transcoders: Any, nodes: Sequence[Mapping[str, Any]]) -> torch.Tensor:
    """Each feature node's decoder row W_dec[feature] of its layer's transcoder, [n, d_out] float32 (a cross-layer
    transcoder's feature: its write to its own block)."""
    if hasattr(transcoders, "decoder_rows"):  # a CLT
        rows = [transcoders.decoder_rows(int(n["layer"]), int(n["feature"]))[0].detach().float().cpu() for n in nodes]
    else:
        rows = [transcoders[int(n["layer"])].W_dec[int(n["feature"])].detach().float().cpu() for n in nodes]
    return torch.stack(rows) if rows else torch.zeros(0, 1)


def cosine_matrix(directions: torch.Tensor) -> np.ndarray:
    unit = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.T).numpy()


def jaccard_matrix(token_sets: Sequence[set[str]]) -> np.ndarray:
    n = len(token_sets)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            union = token_sets[i] | token_sets[j]
            out[i, j] = out[j, i] = len(token_sets[i] & token_sets[j]) / len(union) if union else 0.0
    return out


def span_label(nodes: Sequence[Mapping[str, Any]]) -> str:
    layers = sorted({int(n["layer"]) for n in nodes})
    return f"L{layers[0]}" if len(layers) == 1 else f"L{layers[0]}–L{layers[-1]}"


def shared_tokens(token_lists: Sequence[Sequence[str]], most: int = 2) -> list[str]:
    """Tokens in the top lists of at least half the members (at least two members for a group), most common
    first."""
    counts = Counter(t for tokens in token_lists for t in dict.fromkeys(tokens))
    need = max(2, (len(token_lists) + 1) // 2) if len(token_lists) > 1 else 1
    return [t for t, c in counts.most_common() if c >= need][:most]


def _label(members: Sequence[Mapping[str, Any]], tokens_of: Callable[[Mapping[str, Any]], Sequence[str]] | None
           ) -> str:
    span = span_label(members)
    if tokens_of is None:
        return span
    shared = shared_tokens([tokens_of(n) for n in members])
    return f"{' / '.join(repr(t) for t in shared)} · {span}" if shared else span


def _supernode(index: int, members: Sequence[Mapping[str, Any]], how: str,
               tokens_of: Callable[[Mapping[str, Any]], Sequence[str]] | None) -> Supernode:
    return Supernode(id=f"group-{index}", members=[str(n["id"]) for n in members], label=_label(members, tokens_of),
                     how=how, layers=sorted({int(n["layer"]) for n in members}),
                     positions=sorted({int(n["position"]) for n in members}))


def _groups(nodes: Sequence[Mapping[str, Any]], similarity: np.ndarray, threshold: float, how: str,
            tokens_of: Callable[[Mapping[str, Any]], Sequence[str]] | None, singletons: bool) -> list[Supernode]:
    clusters = agglomerate(similarity, threshold)
    kept = [c for c in clusters if singletons or len(c) > 1]
    return [_supernode(k, [nodes[i] for i in c], how, tokens_of) for k, c in enumerate(kept)]


def group_by_decoder(nodes: Iterable[Mapping[str, Any]], transcoders: Any, threshold: float = 0.5,
                     tokens_of: Callable[[Mapping[str, Any]], Sequence[str]] | None = None,
                     singletons: bool = False) -> list[Supernode]:
    """Feature nodes whose decoder directions agree (average-linkage cosine >= threshold) as supernodes; labels
    name the top tokens the members share (tokens_of(node): e.g. its decoder's top logit tokens) and the layer
    span. Groups of one are left out unless `singletons`."""
    if not -1.0 <= threshold <= 1.0:
        raise InterpscopeError(f"A cosine threshold is between -1 and 1 (got {threshold}).")
    found = feature_nodes(nodes)
    if not found:
        return []
    return _groups(found, cosine_matrix(decoder_directions(transcoders, found)), threshold,
                   f"decoder cosine ≥ {threshold:g}", tokens_of, singletons)


def group_by_contexts(nodes: Iterable[Mapping[str, Any]], top_tokens: Callable[[Mapping[str, Any]], Sequence[str]],
                      threshold: float = 0.3, singletons: bool = False) -> list[Supernode]:
    """Feature nodes whose top-context tokens overlap (average-linkage Jaccard >= threshold) as supernodes, labelled
    by the tokens most members share. top_tokens(node): the tokens a feature store ranks the feature's top contexts
    by (the caller has a store for the node's layer)."""
    if not 0.0 <= threshold <= 1.0:
        raise InterpscopeError(f"A Jaccard threshold is between 0 and 1 (got {threshold}).")
    found = feature_nodes(nodes)
    if not found:
        return []
    sets = [set(top_tokens(n)) for n in found]
    return _groups(found, jaccard_matrix(sets), threshold, f"shared top contexts (Jaccard ≥ {threshold:g})",
                   top_tokens, singletons)


def pick_features(nodes: Iterable[Mapping[str, Any]], selected: Sequence[str], purpose: str) -> list[Mapping[str, Any]]:
    """The feature nodes named by `selected` (each once, in order), refusing an empty choice, unknown ids and other
    node kinds by name; `purpose` says what they are for ("make a supernode", "ablate or steer")."""
    if not selected:
        raise InterpscopeError(f"Choose at least one feature node to {purpose}.")
    by_id = {str(n["id"]): n for n in nodes}
    unknown = [str(s) for s in selected if s not in by_id]
    if unknown:
        raise InterpscopeError(f"Not nodes of this graph: {', '.join(unknown[:5])}.")
    chosen = [by_id[s] for s in dict.fromkeys(selected)]
    others = [str(n["id"]) for n in chosen if n.get("kind") != "feature"]
    if others:
        raise InterpscopeError(f"Only feature nodes (and supernodes of them) can {purpose}; not "
                               f"{', '.join(others[:5])}.")
    return chosen


def manual_group(nodes: Iterable[Mapping[str, Any]], selected: Sequence[str], index: int = 0,
                 tokens_of: Callable[[Mapping[str, Any]], Sequence[str]] | None = None) -> Supernode:
    """A supernode of the selected feature nodes (other kinds in the selection are refused by name)."""
    group = _supernode(index, pick_features(nodes, selected, "make a supernode"), "selected", tokens_of)
    group.id = f"manual-{index}"
    return group


def group_edges(edges: Iterable[Mapping[str, Any]], groups: Sequence[Supernode]) -> list[dict[str, Any]]:
    """The edges with each group's members merged into one node (its id): weights between the same two ends
    summed; edges inside one group dropped (they become the group's own activity). Edges are dicts with source,
    target, weight; the result is sorted by |weight|, strongest first."""
    owner = {member: group.id for group in groups for member in group.members}
    summed: dict[tuple[str, str], float] = {}
    for edge in edges:
        source = owner.get(str(edge["source"]), str(edge["source"]))
        target = owner.get(str(edge["target"]), str(edge["target"]))
        if source == target:
            continue
        summed[(source, target)] = summed.get((source, target), 0.0) + float(edge["weight"])
    return sorted(({"source": s, "target": t, "weight": w} for (s, t), w in summed.items()),
                  key=lambda e: -abs(e["weight"]))


def decoder_top_tokens(lm: Any, transcoders: Any, nodes: Sequence[Mapping[str, Any]], k: int = 5
                       ) -> dict[str, list[tuple[str, float]]]:
    """Each feature node's decoder row through the (norm-folded) unembedding, W_dec[f] @ W_U: the k tokens it
    promotes most, with their logit weights, by node id. Exists for every transcoder, with or without a feature
    store; one matrix product for all the nodes."""
    found = feature_nodes(nodes)
    if not found:
        return {}
    W_U = lm.adapter.folded_unembedding(torch.float32)
    rows = decoder_directions(transcoders, found).to(W_U.device)
    top = torch.topk(rows @ W_U, min(k, W_U.shape[1]), dim=1)
    out = {}
    for node, ids, values in zip(found, top.indices.cpu(), top.values.cpu().tolist(), strict=True):
        out[str(node["id"])] = list(zip(lm.token_strings(ids), values, strict=True))
    return out
