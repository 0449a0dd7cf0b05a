"""QK attribution: which nodes make an attention head attend from a query position to a key position.

An edge that runs through attention is carried by heads (edge_heads); what it does not say is WHY a head attends
there. Under the graph's frozen normalisation (the attention norm's 1/rms per position, and a q/k norm's per head,
taken from the real run), the pre-softmax score of head h of block L from query position q to key position k is
bilinear in the residual stream:

    s = scale * (R_q N_q W_Q n_L[q] x_q + b'_q) . (R_k N_k W_K n_L[k] x_k + b'_k)

(R: the rotary embedding at that position, N: the frozen q/k norm, n_L: the frozen attention norm, b': a projection
bias through the same maps; Llama has none). The residual stream before block L is, in the replacement model, a sum
of node contributions (interpscope.graphs.replay: every embedding, feature and error node's write carried up through
the frozen attention of the blocks between, and a skip connection's linear path): x = sum_i c_i + rest, with `rest`
every node not listed (unkept features, attention biases). So s = sum_{i,j} scale (Q c_i(q)) . (K c_j(k)) exactly,
over the listed nodes, `rest` and the bias on each side: the QUERY side says which target-side nodes (at the query
position) ask, the KEY side which source-side nodes (at the key position) answer. The check: the parts sum to the
score recomputed from the real run's own q/k projections, norms and rotary embedding (to 1e-4), whose softmax is the
head's real attention pattern.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from interpscope.config import InterpscopeError
from interpscope.graphs.dictionary import Dictionary, dictionary
from interpscope.graphs.replay import FrozenRun, attention_forward
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.graphs.result import AttributionGraph
    from interpscope.models.loaded import LoadedModel

REST = "rest"
BIAS = "bias"


@dataclass
class AttentionInputs:
    """What one block's attention saw in the real run: its q/k projections' outputs [T, H*dh] / [T, KV*dh] (biases
    included) and the rotary embedding's cos/sin [T, dh]."""

    q: torch.Tensor
    k: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


def attention_inputs(lm: LoadedModel, ids: torch.Tensor, layer: int) -> AttentionInputs:
    """One clean forward pass (read hooks only) keeping block `layer`'s q/k projection outputs and rotary cos/sin."""
    from interpscope.capture import on_input, scoped

    adapter: Any = lm.adapter
    attention = adapter.attention(layer)
    parts = adapter.attention_projections(layer)
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def read(module: Any, args: tuple, output: torch.Tensor) -> None:
            seen[name] = output.detach()[0].cpu()
        return read

    def keep_rotary(module: Any, args: tuple, kwargs: dict) -> None:
        found = kwargs.get("position_embeddings")
        if found is None and len(args) > 1:
            found = args[1]
        if found is not None:
            seen["cos"], seen["sin"] = (t.detach()[0].cpu() for t in found)

    handle = on_input(attention, keep_rotary, role="read")
    try:
        with torch.no_grad(), scoped([(parts["q"], keep("q")), (parts["k"], keep("k"))], role="read"):
            adapter.model(input_ids=ids, use_cache=False)
    finally:
        handle.remove()
    if "cos" not in seen:
        raise InterpscopeError(f"{lm.name}'s attention takes no rotary embedding as position_embeddings; the QK "
                               "attribution needs it.")
    return AttentionInputs(seen["q"], seen["k"], seen["cos"], seen["sin"])


def _rope(lm: LoadedModel, layer: int):
    """The model's own apply_rotary_pos_emb (from its modeling module), so each family's convention is kept."""
    module = sys.modules[type(lm.adapter.attention(layer)).__module__]
    found = getattr(module, "apply_rotary_pos_emb", None)
    if found is None:
        raise InterpscopeError(f"{type(lm.adapter.attention(layer)).__name__} has no apply_rotary_pos_emb; the QK "
                               "attribution follows the model's own rotary embedding.")
    return found


class _Side:
    """The linear map from residual rows at one position to the post-rotary query (or key) heads, norms frozen."""

    def __init__(self, lm: LoadedModel, run: FrozenRun, layer: int, position: int, seen: AttentionInputs,
                 which: str):
        adapter: Any = lm.adapter
        parts = adapter.attention_projections(layer)
        self.dtype = run.dtype
        self.W = parts[which].weight.detach().to("cpu", run.dtype)  # [heads * dh, d]
        bias = getattr(parts[which], "bias", None)
        self.bias = None if bias is None else bias.detach().to("cpu", run.dtype)
        self.dh = run.d_head
        self.heads = self.W.shape[0] // self.dh
        self.pre = run.attn_scale[layer, position] * run.gamma_attn[layer]  # the frozen attention norm
        raw = (seen.q if which == "q" else seen.k)[position].to(run.dtype).view(self.heads, self.dh)
        norms = adapter.qk_norms(layer)
        self.norm: torch.Tensor | None = None
        if norms:  # Gemma 3 / Qwen3: an RMSNorm per head on q and k, its 1/rms frozen at the real run's
            module = norms[0] if which == "q" else norms[1]
            gamma = adapter.norm_gamma(module)
            gamma = torch.ones(self.dh, dtype=run.dtype) if gamma is None else gamma.detach().to("cpu", run.dtype)
            scale = torch.rsqrt(raw.pow(2).mean(-1) + adapter.norm_eps(module))  # [heads]
            self.norm = scale[:, None] * gamma[None, :]
            self.live = module
        self.cos = seen.cos[position].to(run.dtype)
        self.sin = seen.sin[position].to(run.dtype)
        self.rope = _rope(lm, layer)
        self.raw = raw

    def rotate(self, heads: torch.Tensor) -> torch.Tensor:
        """[B, heads, dh] -> the same rotated by this position's rotary embedding (the model's own function)."""
        x = heads[:, :, None, :]  # [B, heads, 1, dh]
        cos, sin = self.cos[None, None, :], self.sin[None, None, :]  # [1, 1, dh] -> unsqueezed at dim 1 inside
        rotated, _ = self.rope(x, x, cos, sin)
        return rotated[:, :, 0, :]

    def linear(self, rows: torch.Tensor) -> torch.Tensor:
        """Residual rows [B, d] -> their part of the rotated heads [B, heads, dh] (no bias)."""
        heads = ((rows * self.pre) @ self.W.T).view(-1, self.heads, self.dh)
        if self.norm is not None:
            heads = heads * self.norm
        return self.rotate(heads)

    def bias_part(self) -> torch.Tensor | None:
        if self.bias is None:
            return None
        heads = self.bias.view(1, self.heads, self.dh)
        if self.norm is not None:
            heads = heads * self.norm
        return self.rotate(heads)

    def real(self) -> torch.Tensor:
        """The real run's rotated heads [heads, dh]: its projection output through the live norm and rotary."""
        heads = self.raw
        if self.norm is not None:
            with torch.no_grad():
                heads = self.live(heads.to(next(self.live.parameters()).dtype)).to(self.dtype)
        return self.rotate(heads[None])[0]


def _carry(run: FrozenRun, parts: Dictionary, writes: list[list[tuple[int, int, torch.Tensor]]], layer: int
           ) -> torch.Tensor:
    """Each listed node's contribution [B, T, d] to the residual stream before block `layer`: its writes (at the
    embeddings: start -1; after block l's MLP: start l) carried up through the frozen attention (and skip
    connections) of the blocks between."""
    B, T, d = len(writes), run.n_tokens, run.W_E.shape[1]
    X = torch.zeros(B, T, d, dtype=run.dtype)
    for b, items in enumerate(writes):
        for start, position, vector in items:
            if start == -1:
                X[b, position] += vector
    for block in range(layer):
        X = X + attention_forward(run, block, X)
        skip = parts.skips[block]
        if skip is not None:
            X = X + (X * (run.mlp_scale[block, :, None] * run.gamma_mlp[block])) @ skip
        for b, items in enumerate(writes):
            for start, position, vector in items:
                if start == block:
                    X[b, position] += vector
    return X


def _node_writes(run: FrozenRun, parts: Dictionary, node: dict[str, Any], layer: int
                 ) -> list[tuple[int, int, torch.Tensor]]:
    """(after which block, position, vector) of everything a node writes below block `layer`."""
    kind, position = node.get("kind"), int(node["position"])
    if kind == "embedding":
        return [(-1, position, run.embedding_rows(position + 1)[position])]
    if kind == "feature":
        return [(t, position, float(node["activation"]) * W[int(node["feature"])])
                for t, W in parts.layers[int(node["layer"])].writes if t < layer]
    if kind == "error":
        source = int(node["layer"])
        with torch.no_grad():
            acts = [s.encode(run.mlp_in[i][position:position + 1]) for i, s in enumerate(parts.layers)]
            written = parts.written(source, acts, run.mlp_in[source][position:position + 1])
        return [(source, position, run.mlp_out[source][position] - written[0])] if source < layer else []
    return []


@dataclass
class QKAttribution(Result):
    """One head's pre-softmax score from a query to a key position, split over node pairs (see the module).

    query_side / key_side: per listed node (and `rest`, `bias`), its part of the score summed over the other side,
    largest |part| first; pairs: the strongest (query node, key node) parts; total: the sum of every part; score:
    the real run's score (its q/k projections, norms and rotary embedding), difference = total - score."""

    SCHEMA = "interpscope.graph.qk_attribution"
    SCHEMA_VERSION = 1

    layer: int
    head: int
    query_position: int
    key_position: int
    score: float
    total: float
    difference: float
    pattern: float  # the head's real attention probability from the query to the key position
    query_side: list[dict[str, Any]] = field(default_factory=list)
    key_side: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        def top(side: list[dict[str, Any]]) -> str:
            named = [p for p in side if p["node"] not in (REST, BIAS)][:2]
            return ", ".join(f"{p['node']} ({p['part']:+.3g})" for p in named) or "none listed"

        return (f"Head L{self.layer}.H{self.head} attends from position {self.query_position} to "
                f"{self.key_position} with probability {self.pattern:.3f} (score {self.score:+.4g}). On the query "
                f"side {top(self.query_side)} ask most; on the key side {top(self.key_side)} answer most. The parts "
                f"sum to {self.total:+.4g} (difference {self.difference:.1e}).")


def qk_attribution(lm: LoadedModel, run: FrozenRun, transcoders: Any, graph: AttributionGraph, layer: int,
                   head: int, query_position: int, key_position: int, top: int = 10) -> QKAttribution:
    """Split head `head` of block `layer`'s score from `query_position` to `key_position` over the graph's kept nodes
    below that block (and the rest) on each side."""
    from interpscope.graphs.interventions import graph_input_ids

    if not 0 <= layer < run.n_layers or not 0 <= head < run.n_heads:
        raise InterpscopeError(f"No head L{layer}.H{head} in {lm.name} ({run.n_layers} blocks of {run.n_heads} heads).")
    if not 0 <= key_position <= query_position < run.n_tokens:
        raise InterpscopeError(f"A head attends from a query position to an earlier or equal key position (got "
                               f"{query_position} -> {key_position} of {run.n_tokens}).")
    parts = dictionary(transcoders, run.dtype)
    seen = attention_inputs(lm, graph_input_ids(lm, graph), layer)
    q_side = _Side(lm, run, layer, query_position, seen, "q")
    k_side = _Side(lm, run, layer, key_position, seen, "k")
    group = q_side.heads // k_side.heads
    scale = float(getattr(lm.adapter.attention(layer), "scaling", run.d_head ** -0.5))
    nodes = [n for n in graph.nodes if n.get("kind") in ("embedding", "feature", "error") and int(n["layer"]) < layer]
    writes = [_node_writes(run, parts, n, layer) for n in nodes]
    keep = [i for i, w in enumerate(writes) if w]
    nodes, writes = [nodes[i] for i in keep], [writes[i] for i in keep]
    X = _carry(run, parts, writes, layer) if writes else torch.zeros(0, run.n_tokens, run.W_E.shape[1],
                                                                    dtype=run.dtype)
    names = [str(n["id"]) for n in nodes] + [REST]

    def side_rows(side: _Side, position: int) -> tuple[torch.Tensor, list[str]]:
        listed = X[:, position]
        rest = run.resid_pre[layer][position] - listed.sum(0)
        rows = side.linear(torch.cat([listed, rest[None]]))
        bias = side.bias_part()
        if bias is None:
            return rows, list(names)
        return torch.cat([rows, bias]), [*names, BIAS]

    q_rows, q_names = side_rows(q_side, query_position)
    k_rows, k_names = side_rows(k_side, key_position)
    qh, kh = q_rows[:, head], k_rows[:, head // group]  # [Bq, dh], [Bk, dh]
    M = scale * (qh @ kh.T)  # [Bq, Bk]: every pair's part
    real = scale * float(q_side.real()[head] @ k_side.real()[head // group])
    total = float(M.sum())
    pattern = float(run.patterns[layer][head, query_position, key_position])

    def ranked(values: torch.Tensor, labels: list[str]) -> list[dict[str, Any]]:
        order = torch.argsort(values.abs(), descending=True).tolist()
        return [{"node": labels[i], "part": float(values[i])} for i in order[:top]]

    flat = torch.argsort(M.abs().flatten(), descending=True)[:top].tolist()
    pairs = [{"query_node": q_names[i // M.shape[1]], "key_node": k_names[i % M.shape[1]],
              "part": float(M.flatten()[i])} for i in flat]
    return QKAttribution(layer=layer, head=head, query_position=query_position, key_position=key_position,
                         score=real, total=total, difference=total - real, pattern=pattern,
                         query_side=ranked(M.sum(1), q_names), key_side=ranked(M.sum(0), k_names), pairs=pairs)


def real_scores(lm: LoadedModel, run: FrozenRun, graph: AttributionGraph, layer: int, head: int,
                query_position: int) -> torch.Tensor:
    """The real run's pre-softmax scores of one head from a query position to every key position [T]: for the
    check that their softmax over the keys the head may see is its real attention pattern."""
    from interpscope.graphs.interventions import graph_input_ids

    seen = attention_inputs(lm, graph_input_ids(lm, graph), layer)
    q = _Side(lm, run, layer, query_position, seen, "q").real()[head]
    group = run.n_heads // run.n_kv_heads
    scale = float(getattr(lm.adapter.attention(layer), "scaling", run.d_head ** -0.5))
    return torch.stack([scale * (q @ _Side(lm, run, layer, p, seen, "k").real()[head // group])
                        for p in range(run.n_tokens)])
