"""The nodes of the replacement model and the rows of its adjacency matrix (direct effects), computed in batches.

Nodes (columns of the adjacency, sources): every active transcoder feature (layer, position, feature), one error
node per (layer, position), one embedding per position; the logit is a target only. A feature writes
activation * W_dec[f] into the residual stream after its block's MLP; an error node writes
mlp_out - sum_f activation_f W_dec[f] there (the transcoder's reconstruction error AND its decoder bias b_dec, a
constant too: folded into the error so that every contribution to a pre-activation or the logit is a node);
an embedding writes its token's embedding row (times the model's embedding scale) at block 0's input. A transcoder
with a skip connection (W_skip) also writes mlp_in W_skip, which is linear in the residual stream: the replay
carries it as a path (interpscope.graphs.replay.skip_backward), so it is in no node and the error node excludes it.

A row (target) is the logit or an expanded feature: its entries are the direct effects v_s . g(layer_s, pos_s)
from linear_backward, so row sum + b_enc[f] = the feature's pre-activation, and logit row sum (+ the model's
biases, `bias` of the row: Llama has none) = the logit, both exactly for the frozen replay.

circuit-tracer's convention (interpscope.graphs.convention) leaves parts in no node: `replacement(...,
zero_positions=1)` zeroes the first position's features, and `Replacement.left_out` holds vectors written where the
MLPs write that no node carries (b_dec, the BOS position's MLP output); each row then reports their direct effects
(`Rows.left_out`), so row sum + left out (+ bias) still adds up.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.graphs.dictionary import Dictionary, dictionary
from interpscope.graphs.replay import FrozenRun, Reads, linear_backward


@dataclass
class ActiveFeatures:
    """Every active transcoder feature of one prompt, ordered by (layer, position, feature): columns 0..n-1."""

    layer: torch.Tensor  # [n] long
    position: torch.Tensor  # [n] long
    feature: torch.Tensor  # [n] long
    activation: torch.Tensor  # [n]
    starts: list[int]  # starts[L]: the first column of layer L (starts[n_layers] = n)
    padded: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (column [T, k], valid [T, k]), -1 padded

    @property
    def n(self) -> int:
        return int(self.layer.shape[0])


@dataclass
class Replacement:
    """The replacement model of one prompt: the frozen run, its transcoders' features and error nodes."""

    run: FrozenRun
    transcoders: Any  # as given: one transcoder per block, or a cross-layer transcoder
    features: ActiveFeatures
    errors: torch.Tensor  # [L, T, d]
    sinks: list[int]  # positions measured (or put) as attention sinks: never ranked, never expanded
    skips: list[torch.Tensor | None] | None = None  # per block: the transcoder's W_skip [d, d], or None
    parts: Dictionary | None = None  # what each layer reads and writes (interpscope.graphs.dictionary)
    dense: list[torch.Tensor] | None = None  # per source layer: its features' activations [T, k]
    left_out: torch.Tensor | None = None  # [parts, L, T, d]: written after block L's MLP, in no node (or None)

    @property
    def has_skips(self) -> bool:
        return self.skips is not None and any(w is not None for w in self.skips)

    @property
    def n_features(self) -> int:
        return self.features.n

    @property
    def n_columns(self) -> int:
        return self.features.n + self.run.n_layers * self.run.n_tokens + self.run.n_tokens

    def error_column(self, layer: int, position: int) -> int:
        return self.features.n + layer * self.run.n_tokens + position

    def embedding_column(self, position: int) -> int:
        return self.features.n + self.run.n_layers * self.run.n_tokens + position

    @property
    def dictionary(self) -> Dictionary:
        if self.parts is None:
            raise RuntimeError("a Replacement is made by replacement()")
        return self.parts

    def encoder(self, layer: int) -> torch.Tensor:
        return self.dictionary.layers[layer].W_enc

    def b_enc(self, layer: int) -> torch.Tensor:
        return self.dictionary.layers[layer].b_enc

    def writes(self, layer: int) -> list[tuple[int, torch.Tensor]]:
        """Where the features of source layer `layer` write: (target layer, W [k, d])."""
        return self.dictionary.layers[layer].writes

    def pre_activation(self, column: int) -> float:
        """A feature's pre-activation from the real run's MLP input."""
        layer, position, feature = (int(t[column]) for t in (self.features.layer, self.features.position,
                                                               self.features.feature))
        x = self.run.mlp_in[layer][position]
        return float(x @ self.encoder(layer)[:, feature] + self.b_enc(layer)[feature])

    def feature_read(self, column: int) -> tuple[int, int, torch.Tensor]:
        """(layer, position, direction) a feature's pre-activation reads from resid_mid (frozen MLP norm)."""
        layer, position, feature = (int(t[column]) for t in (self.features.layer, self.features.position,
                                                               self.features.feature))
        direction = self.run.mlp_scale[layer, position] * self.run.gamma_mlp[layer] * self.encoder(layer)[:, feature]
        return layer, position, direction


def replacement(run: FrozenRun, transcoders: Any, sinks: list[int], zero_positions: int = 0) -> Replacement:
    """Encode every block's MLP input with its source layer's encoder (one transcoder per block, or a CLT); the
    error node of a block is what the features that write there (and a skip connection) do not write.
    zero_positions: the first positions whose features are set to zero (circuit-tracer zeroes the BOS position's);
    their MLP output is then all in the error node."""
    layers, positions, feats, acts, starts, padded = [], [], [], [], [0], []
    T = run.n_tokens
    parts = dictionary(transcoders, run.dtype)
    if parts.n_layers != run.n_layers:
        raise InterpscopeError(f"The dictionary has {parts.n_layers} layers; the model has {run.n_layers} blocks.")
    dense = []
    for layer, source in enumerate(parts.layers):
        with torch.no_grad():
            active = source.encode(run.mlp_in[layer])  # [T, width]
            active[:zero_positions] = 0
        dense.append(active)
        pos, feat = torch.nonzero(active > 0, as_tuple=True)
        layers.append(torch.full_like(pos, layer))
        positions.append(pos)
        feats.append(feat)
        acts.append(active[pos, feat])
        counts = torch.bincount(pos, minlength=T)
        k = int(counts.max()) if pos.numel() else 0
        column = torch.full((T, max(k, 1)), -1, dtype=torch.long)
        slot = torch.arange(pos.numel()) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        column[pos, slot] = starts[-1] + torch.arange(pos.numel())
        padded.append((column, column >= 0))
        starts.append(starts[-1] + int(pos.numel()))
    errors = [run.mlp_out[t] - parts.written(t, dense, run.mlp_in[t]) for t in range(run.n_layers)]
    features = ActiveFeatures(torch.cat(layers), torch.cat(positions), torch.cat(feats), torch.cat(acts), starts,
                              padded)
    skips = parts.skips if any(w is not None for w in parts.skips) else None
    return Replacement(run, transcoders, features, torch.stack(errors), sorted(sinks), skips, parts, dense)


@dataclass
class Rows:
    """Adjacency rows for a batch of targets: weights [B, n_columns] and the biases each target receives."""

    weights: np.ndarray
    bias: np.ndarray  # [B]: attention constants (Qwen2-style value/output biases) reaching each target
    left_out: np.ndarray | None = None  # [B, parts]: direct effects of Replacement.left_out's parts (or None)


def compute_rows(rep: Replacement, reads: Reads) -> Rows:
    """Direct effects of every node on each read of the batch (one linear backward pass)."""
    run, feats = rep.run, rep.features
    B = reads.size
    weights = torch.zeros(B, rep.n_columns, dtype=run.dtype)
    bias = torch.zeros(B, dtype=run.dtype)
    left = None if rep.left_out is None else torch.zeros(B, rep.left_out.shape[0], dtype=run.dtype)

    def at_post(layer: int, G: torch.Tensor) -> None:
        P = G.shape[1]
        if left is not None and rep.left_out is not None:
            left.add_(torch.einsum("bpd,kpd->bk", G, rep.left_out[:, layer, :P]))
        start = rep.error_column(layer, 0)
        weights[:, start:start + P] = torch.einsum("bpd,pd->bp", G, rep.errors[layer, :P])
        for source, W in rep.dictionary.writes_to(layer):  # a CLT: every source layer at or below this block
            if feats.starts[source + 1] == feats.starts[source]:
                continue
            column, valid = feats.padded[source]
            column, valid = column[:P], valid[:P]
            safe = column.clamp_min(0)
            vectors = W[feats.feature[safe]] * (feats.activation[safe] * valid)[..., None]  # [P, k, d]
            effect = torch.bmm(G.transpose(0, 1), vectors.transpose(1, 2))  # [P, B, k]
            weights[:, column[valid]] += effect.permute(1, 0, 2)[:, valid]

    def at_mid(layer: int, G: torch.Tensor) -> None:
        constant = run.attn_bias[layer]
        if constant is not None:
            bias.add_(G.sum(1) @ constant)

    def at_embed(G: torch.Tensor) -> None:
        P = G.shape[1]
        start = rep.embedding_column(0)
        weights[:, start:start + P] = torch.einsum("bpd,pd->bp", G, run.embedding_rows(P))

    linear_backward(run, reads, at_post, at_embed, at_mid if any(b is not None for b in run.attn_bias) else None,
                    rep.skips)
    return Rows(weights.numpy(), bias.numpy(), None if left is None else left.numpy())


def logit_reads(rep: Replacement, token_ids: list[int], contrast: int | None = None, demean: bool = False) -> Reads:
    """The logits' reads at the last position (with `contrast`, each logit minus the contrast token's; demean: each
    logit minus the mean logit, circuit-tracer's target, read through the demeaned unembedding)."""
    run = rep.run
    n, last = run.n_layers, run.n_tokens - 1
    directions = torch.stack([run.logit_direction(t) for t in token_ids])
    if demean:
        directions = directions - run.final_scale[-1] * run.gamma_final * run.W_U.mean(1)
    if contrast is not None:
        directions = directions - run.logit_direction(contrast)
    return Reads([n] * len(token_ids), [last] * len(token_ids), directions)


def feature_reads(rep: Replacement, columns: list[int]) -> Reads:
    found = [rep.feature_read(c) for c in columns]
    return Reads([f[0] for f in found], [f[1] for f in found], torch.stack([f[2] for f in found]))
