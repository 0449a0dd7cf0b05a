"""LRP beside the direct effects: the relevance of every node of the replacement model for the target logit.

The real model runs once more under an LRP rule set (interpscope.relevance.rules via the relevance engine), with
each block's MLP output replaced by its transcoder features (leaf tensors) times W_dec plus the error node (a
constant leaf): the forward value is unchanged and the MLP's own path is cut, as in the replacement model.
A node's relevance is its tensor x the rule-modified gradient (summed over the hidden dimension for errors and
embeddings).

CP-LRP freezes the attention pattern (no relevance through the softmax) and treats every norm scale as a
constant, so in this linear replacement model its relevance EQUALS the direct effect into the logit (the logit
row of the adjacency): tests/graphs/test_graphs.py checks it. AttnLRP also sends relevance through the softmax (the q/k
path) with its rules, so a node can gain or lose relevance by how it moved attention; where the two rankings part
is reported as `agreement`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from interpscope.capture import hooks
from interpscope.graphs.engine import Replacement
from interpscope.relevance.engine import attribute
from interpscope.relevance.methods import get_method
from interpscope.relevance.targets import Target


def _splice(writes: list[tuple[torch.Tensor, torch.Tensor]], error: torch.Tensor, dtype: torch.dtype,
            skip: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
            ) -> Callable[[torch.Tensor], torch.Tensor]:
    """The edit of one MLP output: the features that write there (acts x W per source layer: one for per-layer
    transcoders, every layer at or below for a CLT) + error node (the same value, the MLP's own path cut), plus a
    skip connection's live mlp_in W_skip (skip: W_skip and where the MLP-input hook left mlp_in): a linear path
    the relevance follows, as the replay does."""
    def edit(x: torch.Tensor) -> torch.Tensor:
        out = error
        for acts, W in writes:
            out = out + acts @ W
        if skip is not None:
            out = out + skip[1]["x"][0].to(out.dtype) @ skip[0]
        return out.to(dtype)[None]
    return edit


def _keep(inputs: dict[str, torch.Tensor]) -> Callable[[torch.Tensor], None]:
    def read(x: torch.Tensor) -> None:
        inputs["x"] = x
    return read


class _FeatureRead:
    """A feature's pre-activation read inside the forward pass (the engine's ExplainedValue)."""

    def __init__(self, rep: Replacement, column: int):
        self.layer, self.position, self.direction = rep.feature_read(column)
        feats = rep.features
        self.x_dir = rep.encoder(self.layer)[:, int(feats.feature[column])]
        self.bias = rep.b_enc(self.layer)[int(feats.feature[column])]
        self.captured: torch.Tensor | None = None

    def read(self, x: torch.Tensor) -> None:
        self.captured = x[0, self.position] @ self.x_dir.to(x.device, x.dtype) + self.bias.to(x.device, x.dtype)

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        if self.captured is None:
            raise RuntimeError("the MLP input hook did not run")
        return self.captured


def lrp_row(lm, rep: Replacement, ids: torch.Tensor, method: str, *, token_id: int | None = None,
            column: int | None = None, contrast_id: int | None = None) -> tuple[np.ndarray, str]:
    """(relevance [n_columns] of every node for the logit of token_id, or for the pre-activation of the feature in
    `column`; the method's label). The caller holds the model's lock."""
    spec = get_method(method, lm.adapter)
    if spec.rules is None:
        raise ValueError(f"{method} is not an LRP method")
    run, feats = rep.run, rep.features
    model_dtype = next(lm.model.parameters()).dtype
    leaves: dict[str, torch.Tensor] = {}
    edits: list[tuple[str, Callable[[torch.Tensor], torch.Tensor | None]]] = []
    parts = rep.dictionary
    for layer, source in enumerate(parts.layers):
        mask = feats.layer == layer
        dense = torch.zeros(run.n_tokens, source.width, dtype=run.dtype)
        dense[feats.position[mask], feats.feature[mask]] = feats.activation[mask]
        leaves[f"features.{layer}"] = dense.to(lm.device).requires_grad_(True)
    for layer in range(run.n_layers):
        error = rep.errors[layer].to(lm.device).requires_grad_(True)
        leaves[f"error.{layer}"] = error
        writes = [(leaves[f"features.{source}"], W.to(lm.device)) for source, W in parts.writes_to(layer)]
        skip = None
        W_skip = None if rep.skips is None else rep.skips[layer]
        if W_skip is not None:
            inputs: dict[str, torch.Tensor] = {}
            edits.append((f"blocks.{layer}.mlp.hook_in", _keep(inputs)))
            skip = (W_skip.to(lm.device), inputs)
        edits.append((f"blocks.{layer}.hook_mlp_out", _splice(writes, error, model_dtype, skip)))
    explained: Target | _FeatureRead = Target(run.n_tokens - 1, int(token_id or 0), contrast_id=contrast_id)
    if column is not None:
        explained = _FeatureRead(rep, column)
        edits.append((f"blocks.{explained.layer}.mlp.hook_in", explained.read))
    with hooks(lm.adapter, edits):
        result = attribute(lm.adapter, ids, explained, spec.rules(lm.adapter), conservation=False, extra=leaves)
    row = np.zeros(rep.n_columns)
    for layer in range(run.n_layers):
        relevance = result.points[f"features.{layer}"]
        start, stop = feats.starts[layer], feats.starts[layer + 1]
        row[start:stop] = relevance[feats.position[start:stop].numpy(), feats.feature[start:stop].numpy()]
        first = rep.error_column(layer, 0)
        row[first:first + run.n_tokens] = result.points[f"error.{layer}"].sum(-1)
    first = rep.embedding_column(0)
    row[first:first + run.n_tokens] = result.relevance
    return row, spec.label


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN with fewer than 2 values or a constant side."""
    if a.size < 2:
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size)
    ranks[order] = np.arange(values.size)
    for value in np.unique(values):  # ties share their average rank
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def agreement(direct: np.ndarray, lrp: np.ndarray, names: list[str], k: int = 10) -> dict:
    """How the direct-effect and LRP rankings of the same nodes agree: Spearman over |values|, and the k nodes
    whose rank moves most (rank 1 = the strongest), each with both ranks and both values."""
    a, b = np.abs(direct), np.abs(lrp)
    rank_a = np.empty(a.size, dtype=int)
    rank_b = np.empty(b.size, dtype=int)
    rank_a[np.argsort(-a, kind="stable")] = np.arange(1, a.size + 1)
    rank_b[np.argsort(-b, kind="stable")] = np.arange(1, b.size + 1)
    shift = np.abs(rank_a - rank_b)
    moved = [{"node": names[i], "direct_rank": int(rank_a[i]), "lrp_rank": int(rank_b[i]),
              "direct": float(direct[i]), "lrp": float(lrp[i])}
             for i in np.argsort(-shift, kind="stable")[:k] if shift[i] > 0]
    return {"spearman": spearman(a, b), "n_nodes": int(a.size), "moved": moved}
