"""What a feature's decoder direction does, from the weights alone: logit weights and nearest features.

Logit weights of feature i: W_dec[i] @ diag(gamma) @ W_U, with gamma the final norm's weight folded into the
unembedding (the norm's scale is left out: it is one positive number per token and does not reorder tokens).
Neighbours: the features whose decoder rows have the largest cosine with row i (i itself excluded).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interpscope.sae.arch import SparseAutoencoder


@dataclass
class WeightStats:
    logit_top_ids: np.ndarray
    logit_top_vals: np.ndarray
    logit_bottom_ids: np.ndarray
    logit_bottom_vals: np.ndarray
    logit_hist_counts: np.ndarray
    logit_range: np.ndarray
    neighbour_ids: np.ndarray
    neighbour_cos: np.ndarray


def folded_unembedding(adapter) -> torch.Tensor:
    """W_U [d_model, vocab] with the final norm's gamma folded in the family's way (float32, CPU)."""
    return adapter.folded_unembedding(torch.float32).cpu()


def logit_weights(sae: SparseAutoencoder, adapter, feature_ids: torch.Tensor | list[int]) -> torch.Tensor:
    """[len(ids), vocab] logit weights of the given features."""
    rows = sae.W_dec.detach().float().cpu()[torch.as_tensor(feature_ids, dtype=torch.long)]
    return rows @ folded_unembedding(adapter)


def _row_histograms(values: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row equal-width histograms from each row's min to max: counts [R, bins], (min, max) [R, 2]."""
    low = values.min(dim=1).values
    high = values.max(dim=1).values
    width = (high - low).clamp_min(1e-12)
    index = ((values - low[:, None]) / width[:, None] * bins).long().clamp(0, bins - 1)
    counts = torch.zeros(values.shape[0], bins, dtype=torch.int64).scatter_add_(1, index, torch.ones_like(index))
    return counts, torch.stack([low, high], dim=1)


@torch.no_grad()
def weight_stats(sae: SparseAutoencoder, adapter, n_logits: int = 10, n_neighbours: int = 10, bins: int = 40,
                 block: int = 256) -> WeightStats:
    """Logit weights (top/bottom n_logits + histogram) and decoder-cosine neighbours for every feature."""
    W_dec = sae.W_dec.detach().float().cpu()
    d_sae = W_dec.shape[0]
    W_U = folded_unembedding(adapter)
    n_logits = min(n_logits, W_U.shape[1])
    n_neighbours = min(n_neighbours, d_sae - 1)
    unit = W_dec / W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
    out: dict[str, list] = {name: [] for name in WeightStats.__dataclass_fields__}
    for start in range(0, d_sae, block):
        rows = slice(start, min(start + block, d_sae))
        logits = W_dec[rows] @ W_U
        top = logits.topk(n_logits, dim=1)
        bottom = logits.topk(n_logits, dim=1, largest=False)
        counts, value_range = _row_histograms(logits, bins)
        cos = unit[rows] @ unit.T
        cos[torch.arange(cos.shape[0]), torch.arange(rows.start, rows.stop)] = -float("inf")
        near = cos.topk(n_neighbours, dim=1) if n_neighbours > 0 else None
        out["logit_top_ids"].append(top.indices.int())
        out["logit_top_vals"].append(top.values)
        out["logit_bottom_ids"].append(bottom.indices.int())
        out["logit_bottom_vals"].append(bottom.values)
        out["logit_hist_counts"].append(counts.int())
        out["logit_range"].append(value_range)
        out["neighbour_ids"].append(near.indices.int() if near else torch.zeros(cos.shape[0], 0, dtype=torch.int32))
        out["neighbour_cos"].append(near.values if near else torch.zeros(cos.shape[0], 0))
    return WeightStats(**{name: torch.cat(parts).numpy().astype(np.float32 if parts[0].is_floating_point()
                                                                  else np.int32)
                          for name, parts in out.items()})
