"""captum baselines on the same target: Integrated Gradients and occlusion (feature ablation) on token embeddings.

Both work on the input embeddings [1, T, d] with an all-zero baseline, and return one relevance per token.
"""
from __future__ import annotations

from typing import Callable

import torch

from backend.adapters import ModelAdapter
from backend.relevance.engine import forward_logits
from backend.relevance.targets import Target

IG_STEPS = 32
TOKENS_PER_BATCH = 2048
IG_TOKENS_PER_BATCH = 512  # several internal batches even for short inputs: progress and its ETA move


def _target_function(adapter: ModelAdapter, target: Target):
    """embeds [B, T, d] -> explained values [B] (logits only at the target position)."""

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        return target.value(forward_logits(adapter.model, embeds, [target.position])[:, 0])
    return forward


def embeds_of(adapter: ModelAdapter, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return adapter.embedding()(input_ids).detach()


def ig_batches(n_tokens: int, steps: int = IG_STEPS) -> tuple[int, int]:
    """(steps per internal batch, number of internal batches) for an input of n_tokens (captum runs at least 2
    steps per batch)."""
    per_batch = min(steps, max(2, IG_TOKENS_PER_BATCH // max(1, n_tokens)))
    return per_batch, -(-steps // per_batch)


def integrated_gradients(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, steps: int = IG_STEPS,
                         progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """captum IntegratedGradients on the embeddings (zero baseline), summed over d: relevance [T] (float64).

    progress(done, total) is called before each internal batch of steps and once at the end (done == total), so
    a page can show a bar with an ETA (backend.progress.with_eta)."""
    from captum.attr import IntegratedGradients

    embeds = embeds_of(adapter, input_ids)
    per_batch, total = ig_batches(input_ids.shape[1], steps)
    forward = _target_function(adapter, target)
    calls = [0]

    def counted(batch_embeds: torch.Tensor) -> torch.Tensor:
        if progress is not None:
            progress(min(calls[0], total), total)
        calls[0] += 1
        return forward(batch_embeds)

    with torch.enable_grad():
        attributions = IntegratedGradients(counted).attribute(
            embeds, baselines=torch.zeros_like(embeds), n_steps=steps, internal_batch_size=per_batch)
    if progress is not None:
        progress(total, total)
    return attributions[0].detach().double().sum(-1)


def occlusion(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target) -> torch.Tensor:
    """captum FeatureAblation, one feature per token (its embedding zeroed): the target's drop, relevance [T]."""
    from captum.attr import FeatureAblation

    embeds = embeds_of(adapter, input_ids)
    n_tokens = input_ids.shape[1]
    mask = torch.arange(n_tokens, device=embeds.device).reshape(1, n_tokens, 1).expand_as(embeds)
    per_eval = max(1, min(n_tokens, TOKENS_PER_BATCH // n_tokens))
    with torch.no_grad():
        attributions = FeatureAblation(_target_function(adapter, target)).attribute(
            embeds, baselines=0.0, feature_mask=mask, perturbations_per_eval=per_eval)
    return attributions[0, :, 0].detach().double()
