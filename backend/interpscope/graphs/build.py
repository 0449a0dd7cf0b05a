"""build_graph: one real forward pass, the replacement model, the adjacency rows in influence order, pruning, LRP.

Order of work (circuit-tracer's): the logit row first; then, in batches, the unexpanded features with the largest
influence on the logit through the rows known so far get their rows, until `max_feature_nodes` features are
expanded (or no feature with influence is left). Features at sink positions (interpscope.sinks: measured massive
activations, a prepended BOS) are never expanded nor ranked; their contributions stay in the sums. Nodes not
expanded keep their outgoing edges only.

Pruning keeps the `node_budget` most influential feature and error nodes (off the sink positions), every
embedding and the logit, and the `edge_budget` strongest edges among them by edge influence (interpscope.graphs.
prune); kept features and errors left without an outgoing edge are dropped.

convention="circuit-tracer" follows circuit-tracer 0.5.0 instead (interpscope.graphs.convention): demeaned logit
targets, b_dec and the first position's MLP outputs in no node, its selection order, expanded features only as
columns, and its pruning thresholds.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.graphs import convention as ct
from interpscope.graphs.defaults import (
    BATCH,
    CHUNK,
    DEFAULT_EDGE_BUDGET,
    DEFAULT_LOGIT_PROBABILITY,
    DEFAULT_MAX_FEATURE_NODES,
    DEFAULT_MAX_LOGITS,
    DEFAULT_NODE_BUDGET,
    MAX_LOGITS,
    MAX_TOKENS,
)
from interpscope.graphs.engine import Replacement, compute_rows, feature_reads, logit_reads, replacement
from interpscope.graphs.nodes import node_dict as _node
from interpscope.graphs.prune import graph_scores, influence, normalised, prune
from interpscope.graphs.replay import check_architecture, record
from interpscope.graphs.result import AttributionGraph, node_id
from interpscope.paths import display_path
from interpscope.token_text import token_text

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

__all__ = ["DEFAULT_EDGE_BUDGET", "DEFAULT_LOGIT_PROBABILITY", "DEFAULT_MAX_FEATURE_NODES", "DEFAULT_MAX_LOGITS",
           "DEFAULT_NODE_BUDGET", "MAX_LOGITS", "MAX_TOKENS", "build_graph"]


def _transcoder_list(lm: LoadedModel, transcoders: Any) -> tuple[Any, str]:
    """(one transcoder per block, a name for the set): a TranscoderSet, or a list of transcoders; or (the CLT, its
    name) for a cross-layer transcoder (interpscope.sae.clt)."""
    from interpscope.sae.clt import CrossLayerTranscoder

    if isinstance(transcoders, CrossLayerTranscoder):
        n, d = lm.adapter.n_layers, lm.adapter.d_model
        if transcoders.n_layers != n:
            raise InterpscopeError(f"Attribution graphs need a CLT over every block: {lm.name} has {n} blocks, the "
                                   f"CLT {transcoders.n_layers}.")
        if (transcoders.d_in, transcoders.d_out) != (d, d):
            raise InterpscopeError(f"The CLT maps {transcoders.d_in} -> {transcoders.d_out}; {lm.name}'s MLPs map "
                                   f"{d} -> {d}.")
        folder = getattr(transcoders, "folder", None)
        name = display_path(folder) if folder else f"in-memory cross-layer transcoder of width {transcoders.d_sae}"
        return transcoders, name
    items = list(getattr(transcoders, "transcoders", transcoders) or [])
    folder = getattr(transcoders, "folder", None)
    # named as pages show paths (display_path): 'assets/...', '[data dir]/...'; in server mode never the server's
    # absolute path, which the graph's JSON and its Neuronpedia export would otherwise carry to a visitor
    name = display_path(folder) if folder else f"in-memory set of width {items[0].cfg.d_sae}" if items else ""
    n, d = lm.adapter.n_layers, lm.adapter.d_model
    if len(items) != n:
        raise InterpscopeError(f"Attribution graphs need one transcoder per block: {lm.name} has {n} blocks, the "
                               f"set has {len(items)}.")
    for layer, tc in enumerate(items):
        if not hasattr(tc, "W_dec") or not hasattr(tc, "b_enc"):
            raise InterpscopeError(f"Layer {layer} of the set is not a transcoder.")
        if tc.cfg.d_in != d or int(tc.W_dec.shape[1]) != d:
            raise InterpscopeError(f"Layer {layer}'s transcoder maps {tc.cfg.d_in} -> {int(tc.W_dec.shape[1])}; "
                                   f"{lm.name}'s MLPs map {d} -> {d}.")
    return items, name


def _ids(lm: LoadedModel, text: str) -> tuple[torch.Tensor, bool]:
    from interpscope.relevance.api import input_ids_for

    if not isinstance(text, str) or not text.strip():
        raise InterpscopeError("The text is empty: type a prompt to trace.")
    return input_ids_for(lm, text, max_tokens=MAX_TOKENS)


def _sinks(lm: LoadedModel, rep_run, prepended: bool):
    from interpscope.relevance.sinks import report_from

    middle = lm.adapter.n_layers // 2 + 1  # the output of the middle block (interpscope.relevance.sinks)
    residual = rep_run.resid_pre[middle] if middle < rep_run.n_layers else rep_run.resid_final
    return report_from(lm.adapter, residual, prepended=0 if prepended else None)


def _target(lm: LoadedModel, logits: torch.Tensor, target: str | int | None,
            contrast: str | int | None = None) -> dict[str, Any]:
    """The explained logit: the target's (the top next token unless named), or with `contrast` the difference
    logit(target) - logit(contrast) (circuit-tracer's contrastive AttributionTargets)."""
    from interpscope.relevance.targets import token_id_of

    token_id = int(logits.argmax()) if target is None else token_id_of(lm.tokenizer, target, int(logits.shape[0]))
    probabilities = torch.softmax(logits.double(), -1)
    chosen = {"token": token_text(lm.tokenizer, token_id), "id": token_id,
              "probability": float(probabilities[token_id]),
              "chosen": "top next token" if target is None else "named"}
    if contrast is not None:
        other = token_id_of(lm.tokenizer, contrast, int(logits.shape[0]))
        if other == token_id:
            raise InterpscopeError(f"The contrast is the target itself ({chosen['token']!r}); name another token.")
        chosen["contrast"] = {"token": token_text(lm.tokenizer, other), "id": other,
                              "probability": float(probabilities[other])}
    return chosen


def _weighted(lm: LoadedModel, probabilities: torch.Tensor, picked: list[int], chosen: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Logit nodes for the picked token ids (the target first, as `chosen`), each weighted by its probability over
    their summed probability (evenly when that sum is 0), so the weights sum to 1."""
    entries = [{"token": token_text(lm.tokenizer, t), "id": t, "probability": float(probabilities[t])}
               for t in picked]
    weights = np.array([e["probability"] for e in entries], dtype=np.float64)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(entries), 1.0 / len(entries))
    for entry, weight in zip(entries, weights, strict=True):
        entry["weight"] = float(weight)
    entries[0] = {**chosen, "weight": float(weights[0])}
    return entries, weights


def _named_logit_nodes(lm: LoadedModel, logits: torch.Tensor, chosen: dict[str, Any],
                       targets: Sequence[str | int]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Logit nodes for a list of named tokens (the first is the graph's target), each weighted by its probability
    over the list's summed probability, as the top-k logits are."""
    from interpscope.relevance.targets import token_id_of

    probabilities = torch.softmax(logits.double(), -1)
    picked: list[int] = []
    for token in targets:
        token_id = token_id_of(lm.tokenizer, token, int(logits.shape[0]))
        if token_id in picked:
            raise InterpscopeError(f"{token_text(lm.tokenizer, token_id)!r} is listed twice among the targets.")
        picked.append(token_id)
    return _weighted(lm, probabilities, picked, chosen)


def _logit_nodes(lm: LoadedModel, logits: torch.Tensor, chosen: dict[str, Any], max_logits: int,
                 logit_probability: float) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The logit nodes (the target first) and the weights that seed influence on them.

    One node (max_logits 1): the target, weight 1, as before. More (circuit-tracer's top logits): the target, then
    the most probable other next tokens until the nodes cover `logit_probability` of the next-token distribution
    or there are `max_logits` of them; each weighted by its probability over the nodes' summed probability, so the
    weights sum to 1 and influence stays on the scale of a one-logit graph."""
    if max_logits == 1:
        return [dict(chosen)], np.ones(1)
    probabilities = torch.softmax(logits.double(), -1)
    picked, covered = [int(chosen["id"])], float(chosen["probability"])
    for token_id in torch.argsort(probabilities, descending=True)[:max_logits + 1].tolist():
        if len(picked) >= max_logits or covered >= logit_probability:
            break
        if int(token_id) in picked:
            continue
        picked.append(int(token_id))
        covered += float(probabilities[token_id])
    return _weighted(lm, probabilities, picked, chosen)


class _Adjacency:
    """Rows computed so far: raw weights, each row's own node (-1 for the logit) and its bias."""

    def __init__(self, rep: Replacement):
        self.rep = rep
        self.rows: list[np.ndarray] = []
        self.normalised: list[np.ndarray] = []  # |row| / its sum, kept as rows arrive (rows never change)
        self.row_node: list[int] = []
        self.bias: list[float] = []
        self.left_out: list[np.ndarray] = []  # per row: direct effects of rep.left_out's parts (circuit-tracer)

    def add(self, reads_for: Sequence[int], reads) -> None:
        rows = compute_rows(self.rep, reads)
        self.rows.extend(rows.weights)
        self.normalised.extend(normalised(rows.weights))
        self.row_node.extend(reads_for)
        self.bias.extend(float(b) for b in rows.bias)
        if rows.left_out is not None:
            self.left_out.extend(rows.left_out)

    def matrix(self) -> tuple[np.ndarray, np.ndarray]:
        return np.stack(self.rows), np.array(self.row_node)


def _expand(adj: _Adjacency, max_feature_nodes: int, seed: np.ndarray, progress) -> None:
    """Compute feature rows in order of influence on the logit (re-ranked after every batch). When the budget holds
    every rankable feature, nothing is capped, so the order cannot matter: each round expands every feature the
    rows so far give influence, at once (no re-ranking every BATCH; a feature no path reaches is never expanded)."""
    rep = adj.rep
    rankable = ~np.isin(rep.features.position.numpy(), rep.sinks)
    expanded = np.zeros(rep.n_features, dtype=bool)
    uncapped = max_feature_nodes >= int(rankable.sum())
    while expanded.sum() < max_feature_nodes:
        row_node = np.array(adj.row_node)
        weights = np.concatenate([seed, np.zeros(len(row_node) - seed.size)])
        score = influence(np.stack(adj.normalised), row_node, weights)
        score = score[:rep.n_features]
        open_ = np.flatnonzero(rankable & ~expanded & (score > 0))
        if open_.size == 0:
            break
        room = int(max_feature_nodes - expanded.sum())
        chosen = open_[np.argsort(-score[open_], kind="stable")[:room if uncapped else min(BATCH, room)]]
        expanded[chosen] = True
        # a backward pass costs rows x (highest layer + 1) x (last position + 1): passes of alike rows cost less
        chosen = chosen[np.lexsort((rep.features.position.numpy()[chosen], rep.features.layer.numpy()[chosen]))]
        for part in np.array_split(chosen, max(1, round(chosen.size / CHUNK))):
            adj.add(list(part), feature_reads(rep, [int(c) for c in part]))
        if progress is not None:
            progress(0.1 + 0.7 * float(expanded.sum()) / max_feature_nodes,
                     f"Expanded {int(expanded.sum())} of up to {max_feature_nodes} features")


def check_request(lm: LoadedModel, text: str, *, target: str | int | None = None, contrast: str | int | None = None,
                  targets: Sequence[str | int] | None = None, max_logits: int | None = None,
                  logit_probability: float = DEFAULT_LOGIT_PROBABILITY, convention: str = "interpscope",
                  node_threshold: float = ct.NODE_THRESHOLD, edge_threshold: float = ct.EDGE_THRESHOLD,
                  budgets: dict[str, Any] | None = None) -> tuple[int, str | int | None]:
    """Every check of a graph request that needs no forward pass (settings, the text's length, each named token is
    one token of the vocabulary), so a caller can refuse before it estimates or runs anything. Returns (max_logits
    as resolved, the target: the first of `targets` when they are given)."""
    from interpscope.relevance.targets import token_id_of

    ct.check_convention(convention, node_threshold, edge_threshold)
    compatible = convention == "circuit-tracer"
    if max_logits is None:  # circuit-tracer's default: the top tokens covering logit_probability, up to 10
        max_logits = 1 if contrast is not None or targets else ct.MAX_LOGITS if compatible else DEFAULT_MAX_LOGITS
    for name, value in (budgets or {}).items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InterpscopeError(f"{name} must be a non-negative integer (got {value!r}).")
    if not isinstance(max_logits, int) or isinstance(max_logits, bool) or not 1 <= max_logits <= MAX_LOGITS:
        raise InterpscopeError(f"max_logits must be a whole number from 1 to {MAX_LOGITS} (got {max_logits!r}).")
    if isinstance(logit_probability, bool) or not isinstance(logit_probability, (int, float)) or not (
            0.0 < float(logit_probability) <= 1.0):
        raise InterpscopeError(f"logit_probability must be above 0 and at most 1 (got {logit_probability!r}).")
    if contrast is not None and (max_logits > 1 or targets):
        raise InterpscopeError("A contrast explains one logit difference: it does not go with several logit nodes "
                               "(max_logits > 1 or a list of targets).")
    if targets is not None:
        if isinstance(targets, (str, int)) or not 1 <= len(targets) <= MAX_LOGITS:
            raise InterpscopeError(f"targets must list 1 to {MAX_LOGITS} tokens (got {targets!r}).")
        if max_logits > 1:
            raise InterpscopeError("Name the logit nodes as a list of targets or as the top max_logits, not both.")
        if target is not None and targets[0] != target:
            raise InterpscopeError("With a list of targets, the first one is the target: leave target unset.")
        target = targets[0]
    _ids(lm, text)  # empty or too long: refused now
    vocab = int(lm.adapter.vocab_size)
    for token in [t for t in (target, contrast, *(targets or ())) if t is not None]:
        token_id_of(lm.tokenizer, token, vocab)
    return max_logits, target


def build_graph(lm: LoadedModel, transcoders: Any, text: str, *, target: str | int | None = None,
                node_budget: int = DEFAULT_NODE_BUDGET, edge_budget: int = DEFAULT_EDGE_BUDGET,
                max_feature_nodes: int = DEFAULT_MAX_FEATURE_NODES, lrp: str | None = "attnlrp",
                progress: Callable[[float, str], None] | None = None, lrp_features: int = 0,
                max_logits: int | None = None, logit_probability: float = DEFAULT_LOGIT_PROBABILITY,
                contrast: str | int | None = None, targets: Sequence[str | int] | None = None,
                convention: str = "interpscope", node_threshold: float = ct.NODE_THRESHOLD,
                edge_threshold: float = ct.EDGE_THRESHOLD) -> AttributionGraph:
    """The attribution graph of `text`'s next-token `target` (a token string, an id or '#id'; None: the model's top
    next token) over `transcoders` (a TranscoderSet or one transcoder per block). lrp: an LRP method name
    ('attnlrp', 'cplrp') for the LRP edges into the logit beside the direct ones, or None; lrp_features: also the
    LRP edges into that many kept features, most influential first (one more LRP pass each). max_logits: logit
    nodes (1: the target alone; up to MAX_LOGITS: the target and the top next tokens until they cover
    `logit_probability`, influence seeded by their probabilities, as circuit-tracer does); the target stays the
    graph's `logit`, its interventions' and LRP's token. contrast: explain logit(target) - logit(contrast)
    instead (one logit node, the difference; its interventions and LRP explain the difference too). targets: a
    list of tokens as the logit nodes (the first is the target), weighted by their probabilities like the top
    logits; neither goes with max_logits > 1, nor with each other. convention: "interpscope" (the default: raw
    logit, every part in a node, budgets) or "circuit-tracer" (interpscope.graphs.convention: demeaned logits
    weighted by raw probabilities, b_dec and the first position's MLP outputs in no node, circuit-tracer's selection
    order, pruned at `node_threshold` / `edge_threshold`; node_budget and edge_budget are not used)."""
    start = time.perf_counter()
    compatible = convention == "circuit-tracer"
    max_logits, target = check_request(
        lm, text, target=target, contrast=contrast, targets=targets, max_logits=max_logits,
        logit_probability=logit_probability, convention=convention, node_threshold=node_threshold,
        edge_threshold=edge_threshold, budgets=dict(node_budget=node_budget, edge_budget=edge_budget,
                                                    max_feature_nodes=max_feature_nodes, lrp_features=lrp_features))
    check_architecture(lm.adapter)
    items, set_name = _transcoder_list(lm, transcoders)
    ids, prepended = _ids(lm, text)
    report = lambda fraction, message: progress(fraction, message) if progress is not None else None  # noqa: E731
    with model_lock(lm):
        report(0.0, "Recording the forward pass")
        run = record(lm, ids)
        chosen = _target(lm, run.logits, target, contrast)
        if targets is not None:
            logit_nodes, seed = _named_logit_nodes(lm, run.logits, chosen, targets)
        else:
            logit_nodes, seed = _logit_nodes(lm, run.logits, chosen, max_logits, float(logit_probability))
        sinks = _sinks(lm, run, prepended)
        if compatible:
            seed = ct.logit_weights(logit_nodes)
            rep = replacement(run, items, [], zero_positions=1)
            ct.move_out_of_nodes(rep)
        else:
            rep = replacement(run, items, sinks.positions)
        report(0.05, "Computing the logit's row" if len(logit_nodes) == 1 else
               f"Computing the rows of {len(logit_nodes)} logits")
        adj = _Adjacency(rep)
        adj.add([-1] * len(logit_nodes), logit_reads(rep, [int(e["id"]) for e in logit_nodes],
                                                     contrast=None if contrast is None else chosen["contrast"]["id"],
                                                     demean=compatible and contrast is None))
        if compatible:
            ct.expand(adj, max_feature_nodes, seed, CHUNK, progress)
            report(0.8, "Pruning")
            graph = ct.assemble(lm, rep, adj, seed, logit_nodes, text, set_name, float(node_threshold),
                                float(edge_threshold), max_feature_nodes)
        else:
            _expand(adj, max_feature_nodes, seed, progress)
            report(0.8, "Pruning")
            graph = _assemble(lm, rep, adj, seed, logit_nodes, text, set_name, sinks, node_budget, edge_budget,
                              max_feature_nodes)
        if lrp and compatible:
            graph.notes.append("No LRP edges in circuit-tracer's convention (LRP explains the raw logit).")
        elif lrp:
            report(0.85, f"LRP ({lrp}) into the logit" + (f" and {lrp_features} features" if lrp_features else ""))
            _add_lrp(lm, graph, rep, adj, ids, lrp, lrp_features)
    graph.seconds = time.perf_counter() - start
    report(1.0, "Done")
    return graph


def _assemble(lm: LoadedModel, rep: Replacement, adj: _Adjacency, seed: np.ndarray, logit_nodes: list[dict], text: str,
              set_name: str, sinks, node_budget: int, edge_budget: int, max_feature_nodes: int) -> AttributionGraph:
    """The pruned graph; rows 0..k-1 of the adjacency are the k logit nodes (logit_nodes, the target first)."""
    run = rep.run
    A, row_node = adj.matrix()
    tokens = lm.token_strings(run.ids)
    T, n = run.n_tokens, run.n_layers
    k = len(logit_nodes)
    weights = np.concatenate([seed, np.zeros(len(row_node) - k)])
    sink_set = set(rep.sinks)
    positions = np.concatenate([rep.features.position.numpy(), np.tile(np.arange(T), n), np.arange(T)])
    is_embedding = np.arange(rep.n_columns) >= rep.embedding_column(0)
    ranked = np.flatnonzero(~is_embedding & ~np.isin(positions, list(sink_set)))
    pruned = prune(A, row_node, weights, ranked, np.flatnonzero(is_embedding), node_budget, edge_budget)
    scores = graph_scores(A, row_node, weights, np.arange(rep.n_features, rep.embedding_column(0)),
                          np.flatnonzero(is_embedding))
    chosen = logit_nodes[0]
    token_id = int(chosen["id"])
    contrast_id = int(chosen["contrast"]["id"]) if "contrast" in chosen else None
    logit_row = A[0]

    def value_of(t: int) -> float:
        """A logit node's value: the logit, or the target's difference to the contrast."""
        return float(run.logits[t]) - (float(run.logits[contrast_id]) if contrast_id is not None else 0.0)
    nodes = [_node(rep, int(c), tokens, pruned.influence[c], logit_row[c], sink_set) for c in pruned.nodes]
    ids_of = {int(c): node["id"] for c, node in zip(pruned.nodes, nodes, strict=False)}
    logit_ids = [node_id("logit", n, T - 1, int(e["id"])) for e in logit_nodes]
    for r, (entry, logit_id) in enumerate(zip(logit_nodes, logit_ids, strict=True)):
        node = {"id": logit_id, "kind": "logit", "layer": n, "position": T - 1, "token": entry["token"],
                "feature": int(entry["id"]), "activation": value_of(int(entry["id"])), "influence": float(seed[r])}
        if contrast_id is not None:
            node["token"] = f"{entry['token']} − {chosen['contrast']['token']}"
            node["contrast"] = {"token": chosen["contrast"]["token"], "id": contrast_id}
        if k > 1:
            node.update(probability=float(entry["probability"]), target=r == 0)
        nodes.append(node)
    edges = [{"source": ids_of[c], "target": logit_ids[r] if row_node[r] < 0 else ids_of[int(row_node[r])],
              "weight": w} for r, c, w in pruned.edges]
    has_bias = run.b_U is not None or any(b is not None for b in run.attn_bias)

    def bias_of(r: int) -> float:
        if run.b_U is None:
            return adj.bias[r]
        own = float(run.b_U[int(logit_nodes[r]["id"])])
        return adj.bias[r] + own - (float(run.b_U[contrast_id]) if contrast_id is not None else 0.0)

    logits: list[dict[str, Any]] | None = None
    if k > 1:
        logits = []
        for r, entry in enumerate(logit_nodes):
            row = {"token": entry["token"], "id": int(entry["id"]), "probability": float(entry["probability"]),
                   "weight": float(seed[r]), "logit": float(run.logits[int(entry["id"])]),
                   "logit_inputs_sum": float(A[r].sum(dtype=np.float64)), "node": logit_ids[r]}
            if has_bias:
                row["bias_sum"] = bias_of(r)
            logits.append(row)
    notes = [f"Error nodes hold the transcoder's reconstruction error and its decoder bias b_dec "
             f"(mlp_out - sum of features' a * W_dec); {len(rep.sinks)} sink position(s) never ranked."]
    if k > 1:
        covered = sum(float(e["probability"]) for e in logit_nodes)
        notes.append(f"{k} logit nodes (the target first) cover p = {covered:.3f} of the next token; influence is "
                     f"seeded by their probabilities, normalised to sum 1.")
    return AttributionGraph(
        model=lm.name, transcoders=set_name, text=text, tokens=tokens, token_ids=[int(i) for i in run.ids],
        target={key: value for key, value in chosen.items() if key != "weight"},
        logit=value_of(token_id), logit_inputs_sum=float(logit_row.sum(dtype=np.float64)),
        bias_sum=bias_of(0) if has_bias else None, nodes=nodes, edges=edges,
        replacement_score=scores.replacement, completeness_score=scores.completeness, node_budget=node_budget,
        edge_budget=edge_budget, max_feature_nodes=max_feature_nodes, n_active_features=rep.n_features,
        n_expanded_features=int((row_node >= 0).sum()), sinks=sinks.rows(tokens), notes=notes, logits=logits)


def _add_lrp(lm: LoadedModel, graph: AttributionGraph, rep: Replacement, adj: _Adjacency, ids: torch.Tensor,
             method: str, n_features: int) -> None:
    """LRP relevance from the kept nodes into the logit (and into the `n_features` most influential kept features),
    and the agreement of the logit's LRP relevances with the kept nodes' direct effects on it."""
    from interpscope.graphs.interventions import target_node
    from interpscope.graphs.lrp import agreement, lrp_row

    logit = graph.node(target_node(graph))
    columns = {node["id"]: column for column, node in _columns(rep, graph)}
    names = list(columns)
    contrast = graph.target.get("contrast")
    row, label = lrp_row(lm, rep, ids, method, token_id=int(logit["feature"]),
                         contrast_id=None if contrast is None else int(contrast["id"]))
    values = np.array([row[columns[name]] for name in names])
    edges = [{"source": name, "target": logit["id"], "weight": float(v)}
             for name, v in zip(names, values, strict=True) if v != 0]
    features = sorted((n for n in graph.nodes if n["kind"] == "feature" and not n.get("sink")),
                      key=lambda n: -n["influence"])[:n_features]
    for node in features:
        feature_row, _ = lrp_row(lm, rep, ids, method, column=columns[node["id"]])
        edges.extend({"source": name, "target": node["id"], "weight": float(feature_row[columns[name]])}
                     for name in names if feature_row[columns[name]] != 0)
    graph.lrp_method = label
    graph.lrp_edges = sorted(edges, key=lambda e: -abs(e["weight"]))
    graph.agreement = agreement(adj.rows[0][[columns[name] for name in names]], values, names)
    graph.agreement["over"] = "kept nodes: direct effect on the logit vs LRP relevance for it"


def _columns(rep: Replacement, graph: AttributionGraph):
    """(column, node) for the graph's non-logit nodes."""
    for node in graph.nodes:
        kind, position = node["kind"], int(node["position"])
        if kind == "embedding":
            yield rep.embedding_column(position), node
        elif kind == "error":
            yield rep.error_column(int(node["layer"]), position), node
        elif kind == "feature":
            yield _feature_column(rep, int(node["layer"]), position, int(node["feature"])), node


def _feature_column(rep: Replacement, layer: int, position: int, feature: int) -> int:
    feats = rep.features
    start, stop = feats.starts[layer], feats.starts[layer + 1]
    hit = np.flatnonzero((feats.position[start:stop] == position).numpy() & (feats.feature[start:stop] == feature)
                         .numpy())
    return start + int(hit[0])
