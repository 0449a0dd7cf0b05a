"""Faithfulness of a relevance map: perturbation curves (MoRF, LeRF) and ABPC.

Tokens are removed in order of relevance, most relevant first (MoRF) or least relevant first (LeRF), and the
explained value is tracked. Removing a token replaces its input embedding by a baseline: all zeros (the default),
the pad token's embedding or the mean token embedding — the same references Integrated Gradients and occlusion
offer (interpscope.relevance.baselines.BASELINES). ABPC = AUC(LeRF) - AUC(MoRF) over the removed fraction in [0, 1];
higher means the map found what matters. Positions in `fixed` are never removed nor ranked (e.g. position 0, an
attention sink): the curves then run over the other tokens.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.relevance.engine import forward_logits
from interpscope.relevance.targets import Target

DEFAULT_STEPS = 10
TOKENS_PER_BATCH = 2048  # perturbed sequences are batched up to this many tokens per forward pass


@dataclass
class PerturbationCurves:
    """Explained value after removing a fraction of the tokens, in both orders; the areas under both curves."""

    fractions: np.ndarray
    morf: np.ndarray
    lerf: np.ndarray
    abpc: float
    morf_auc: float | None = None
    lerf_auc: float | None = None


def removal_counts(n_tokens: int, steps: int) -> list[int]:
    """How many tokens are removed at each of `steps` + 1 points from none to all (distinct, increasing)."""
    return sorted({round(i * n_tokens / steps) for i in range(steps + 1)})


def _area(fractions: np.ndarray, values: np.ndarray) -> float:
    widths = np.diff(fractions)
    return float(np.sum(widths * (values[1:] + values[:-1]) / 2))


def _orders(relevance: np.ndarray, fixed: Sequence[int]) -> np.ndarray:
    """Rankable positions, most relevant first (stable: ties keep text order)."""
    rankable = np.array([i for i in range(relevance.size) if i not in set(fixed)], dtype=np.int64)
    return rankable[np.argsort(-relevance[rankable], kind="stable")]


def _evaluate(adapter: ModelAdapter, embeds: torch.Tensor, references: Sequence[torch.Tensor], target: Target,
              jobs: Sequence[tuple[int, tuple[int, ...]]]) -> dict[tuple[int, tuple[int, ...]], float]:
    """The explained value for each (reference index, removed positions) job, batched, each distinct job once."""
    unique = list(dict.fromkeys(jobs))
    n_tokens = int(embeds.shape[1])
    per_batch = max(1, TOKENS_PER_BATCH // n_tokens)
    values: dict = {}
    with torch.no_grad():
        for start in range(0, len(unique), per_batch):
            chunk = unique[start:start + per_batch]
            batch = embeds.expand(len(chunk), -1, -1).clone()
            for row, (ref, removed) in enumerate(chunk):
                if removed:
                    index = torch.as_tensor(removed, dtype=torch.long, device=embeds.device)
                    batch[row, index] = references[ref][0, index].to(batch.dtype)
            logits = forward_logits(adapter.model, batch, [target.position])[:, 0]
            for job, value in zip(chunk, target.value(logits).double().cpu().tolist(), strict=True):
                values[job] = value
    return values


Key = TypeVar("Key", bound=Hashable)  # what names a relevance map (a method, a label)


def curves_for_maps(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target,
                    maps: Mapping[Key, np.ndarray], references: Mapping[str, torch.Tensor],
                    pairs: Sequence[tuple[Key, str]], steps: int = DEFAULT_STEPS,
                    fixed: Sequence[int] = ()) -> dict[tuple[Key, str], PerturbationCurves]:
    """MoRF / LeRF curves for many (map key, baseline name) pairs of one input in shared batches (the caller holds
    the model's lock). maps: relevance [T] per key; references: baseline embeddings [1, T, d] per name."""
    n_tokens = int(input_ids.shape[1])
    n_rank = n_tokens - len(set(fixed) & set(range(n_tokens)))
    if n_rank < 1:
        raise ValueError("No token left to remove once the fixed positions are kept.")
    counts = removal_counts(n_rank, min(steps, n_rank))
    names = list(references)
    with torch.no_grad():
        embeds = adapter.embedding()(input_ids)
    plans, jobs = {}, []
    for key, baseline in pairs:
        relevance = np.asarray(maps[key], dtype=np.float64)
        if relevance.shape != (n_tokens,):
            raise ValueError(f"relevance has shape {relevance.shape}, expected ({n_tokens},)")
        most = _orders(relevance, fixed)
        least = most[::-1]
        ref = names.index(baseline)
        morf = [(ref, tuple(sorted(most[:c].tolist()))) for c in counts]
        lerf = [(ref, tuple(sorted(least[:c].tolist()))) for c in counts]
        plans[(key, baseline)] = (morf, lerf)
        jobs += morf + lerf
    values = _evaluate(adapter, embeds, [references[n] for n in names], target, jobs)
    fractions = np.array(counts, dtype=np.float64) / n_rank
    out = {}
    for pair, (morf_jobs, lerf_jobs) in plans.items():
        morf_curve = np.array([values[j] for j in morf_jobs])
        lerf_curve = np.array([values[j] for j in lerf_jobs])
        morf_auc, lerf_auc = _area(fractions, morf_curve), _area(fractions, lerf_curve)
        out[pair] = PerturbationCurves(fractions=fractions, morf=morf_curve, lerf=lerf_curve, abpc=lerf_auc - morf_auc,
                                       morf_auc=morf_auc, lerf_auc=lerf_auc)
    return out


def perturbation_curves(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, relevance: np.ndarray,
                        steps: int = DEFAULT_STEPS, reference: torch.Tensor | None = None,
                        fixed: Sequence[int] = ()) -> PerturbationCurves:
    """MoRF / LeRF curves and ABPC for one relevance map [T] (the caller holds the model's lock); removed tokens
    take the embedding of `reference` [1, T, d] (default all zeros); `fixed` positions are never removed."""
    if reference is None:
        with torch.no_grad():
            reference = torch.zeros_like(adapter.embedding()(input_ids))
    return curves_for_maps(adapter, input_ids, target, {"map": relevance}, {"baseline": reference},
                           [("map", "baseline")], steps=steps, fixed=fixed)[("map", "baseline")]
