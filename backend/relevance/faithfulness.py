"""Faithfulness of a relevance map: perturbation curves (MoRF, LeRF) and ABPC.

Tokens are removed (their input embedding set to zero, the same baseline IG and occlusion use) in order of
relevance, most relevant first (MoRF) or least relevant first (LeRF), and the explained value is tracked.
ABPC = AUC(LeRF) - AUC(MoRF) over the removed fraction in [0, 1]; higher means the map found what matters.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from backend.adapters import ModelAdapter
from backend.relevance.engine import forward_logits
from backend.relevance.targets import Target

DEFAULT_STEPS = 10
SEQUENCES_PER_BATCH = 16


@dataclass
class PerturbationCurves:
    """Explained value after removing a fraction of the tokens, in both orders."""

    fractions: np.ndarray
    morf: np.ndarray
    lerf: np.ndarray
    abpc: float


def removal_counts(n_tokens: int, steps: int) -> list[int]:
    """How many tokens are removed at each of `steps` + 1 points from none to all (distinct, increasing)."""
    return sorted({round(i * n_tokens / steps) for i in range(steps + 1)})


def _area(fractions: np.ndarray, values: np.ndarray) -> float:
    widths = np.diff(fractions)
    return float(np.sum(widths * (values[1:] + values[:-1]) / 2))


def perturbation_curves(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, relevance: np.ndarray,
                        steps: int = DEFAULT_STEPS) -> PerturbationCurves:
    """MoRF / LeRF curves and ABPC for one relevance map [T] (the caller holds the model's lock)."""
    n_tokens = int(input_ids.shape[1])
    relevance = np.asarray(relevance, dtype=np.float64)
    if relevance.shape != (n_tokens,):
        raise ValueError(f"relevance has shape {relevance.shape}, expected ({n_tokens},)")
    counts = removal_counts(n_tokens, steps)
    most_first = np.argsort(-relevance, kind="stable")
    least_first = most_first[::-1].copy()
    keep_masks = []
    inner = counts[1:-1]  # none and all removed are the same for both orders: run them once
    for order, chosen in ((most_first, counts), (least_first, inner)):
        for count in chosen:
            keep = torch.ones(n_tokens, dtype=torch.bool)
            keep[torch.as_tensor(order[:count].copy(), dtype=torch.long)] = False
            keep_masks.append(keep)
    masks = torch.stack(keep_masks).to(input_ids.device)
    values = []
    with torch.no_grad():
        embeds = adapter.embedding()(input_ids)
        for start in range(0, len(masks), SEQUENCES_PER_BATCH):
            chunk = masks[start:start + SEQUENCES_PER_BATCH]
            batch = embeds.expand(len(chunk), -1, -1) * chunk[:, :, None].to(embeds.dtype)
            logits = forward_logits(adapter.model, batch, [target.position])[:, 0]
            values.append(target.value(logits).double().cpu())
    values_all = torch.cat(values).numpy()
    fractions = np.array(counts, dtype=np.float64) / n_tokens
    morf = values_all[:len(counts)]
    lerf = np.concatenate([morf[:1], values_all[len(counts):], morf[-1:]]) if len(counts) > 1 else morf.copy()
    return PerturbationCurves(fractions=fractions, morf=morf, lerf=lerf,
                              abpc=_area(fractions, lerf) - _area(fractions, morf))
