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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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
    transcoders: list  # index = block
    features: ActiveFeatures
    errors: torch.Tensor  # [L, T, d]
    sinks: list[int]  # positions measured (or put) as attention sinks: never ranked, never expanded
    skips: list[torch.Tensor | None] | None = None  # per block: the transcoder's W_skip [d, d], or None

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

    def encoder(self, layer: int) -> torch.Tensor:
        return self.transcoders[layer].W_enc.detach().to(self.run.dtype)

    def decoder(self, layer: int) -> torch.Tensor:
        return self.transcoders[layer].W_dec.detach().to(self.run.dtype)

    def b_enc(self, layer: int) -> torch.Tensor:
        return self.transcoders[layer].b_enc.detach().to(self.run.dtype)

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


def _in_dtype(tc, dtype: torch.dtype):
    """The transcoder in the replay's precision (a converted copy when it differs: the caller's stays as it is)."""
    if tc.W_enc.dtype == dtype:
        return tc
    import copy

    return copy.deepcopy(tc).to(dtype)


def skip_matrix(tc, dtype: torch.dtype) -> torch.Tensor | None:
    """A transcoder's skip connection W_skip [d_in, d_out] in the replay's dtype, or None (no skip)."""
    W_skip = getattr(tc, "W_skip", None)
    return None if W_skip is None else W_skip.detach().to(dtype)


def replacement(run: FrozenRun, transcoders: list, sinks: list[int]) -> Replacement:
    """Encode every block's MLP input with its transcoder; the error nodes are what the features (and a skip
    connection) do not write."""
    layers, positions, feats, acts, starts, padded = [], [], [], [], [0], []
    errors = []
    T = run.n_tokens
    transcoders = [_in_dtype(tc, run.dtype) for tc in transcoders]
    for layer, tc in enumerate(transcoders):
        with torch.no_grad():
            active = tc.encode(run.mlp_in[layer])  # [T, width]
        W_dec = tc.W_dec.detach().to(run.dtype)
        written = active @ W_dec
        skip = skip_matrix(tc, run.dtype)
        if skip is not None:
            written = written + run.mlp_in[layer] @ skip
        errors.append(run.mlp_out[layer] - written)
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
    features = ActiveFeatures(torch.cat(layers), torch.cat(positions), torch.cat(feats), torch.cat(acts), starts,
                              padded)
    skips = [skip_matrix(tc, run.dtype) for tc in transcoders]
    return Replacement(run, list(transcoders), features, torch.stack(errors), sorted(sinks),
                       skips if any(w is not None for w in skips) else None)


@dataclass
class Rows:
    """Adjacency rows for a batch of targets: weights [B, n_columns] and the biases each target receives."""

    weights: np.ndarray
    bias: np.ndarray  # [B]: attention constants (Qwen2-style value/output biases) reaching each target


def compute_rows(rep: Replacement, reads: Reads) -> Rows:
    """Direct effects of every node on each read of the batch (one linear backward pass)."""
    run, feats = rep.run, rep.features
    B = reads.size
    weights = torch.zeros(B, rep.n_columns, dtype=run.dtype)
    bias = torch.zeros(B, dtype=run.dtype)

    def at_post(layer: int, G: torch.Tensor) -> None:
        P = G.shape[1]
        start = rep.error_column(layer, 0)
        weights[:, start:start + P] = torch.einsum("bpd,pd->bp", G, rep.errors[layer, :P])
        column, valid = feats.padded[layer]
        if feats.starts[layer + 1] == feats.starts[layer]:
            return
        column, valid = column[:P], valid[:P]
        safe = column.clamp_min(0)
        vectors = rep.decoder(layer)[feats.feature[safe]] * (feats.activation[safe] * valid)[..., None]  # [P, k, d]
        effect = torch.bmm(G.transpose(0, 1), vectors.transpose(1, 2))  # [P, B, k]
        weights[:, column[valid]] = effect.permute(1, 0, 2)[:, valid]

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
    return Rows(weights.numpy(), bias.numpy())


def logit_reads(rep: Replacement, token_ids: list[int]) -> Reads:
    run = rep.run
    n, last = run.n_layers, run.n_tokens - 1
    return Reads([n] * len(token_ids), [last] * len(token_ids),
                 torch.stack([run.logit_direction(t) for t in token_ids]))


def feature_reads(rep: Replacement, columns: list[int]) -> Reads:
    found = [rep.feature_read(c) for c in columns]
    return Reads([f[0] for f in found], [f[1] for f in found], torch.stack([f[2] for f in found]))
