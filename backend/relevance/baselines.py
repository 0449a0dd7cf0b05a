"""captum baselines on the same target: Integrated Gradients and occlusion (feature ablation) on token embeddings.

Both work on the input embeddings [1, T, d] with an all-zero baseline, and return one relevance per token.
"""
from __future__ import annotations

import torch

from backend.adapters import ModelAdapter
from backend.relevance.engine import forward_logits
from backend.relevance.targets import Target

IG_STEPS = 32
TOKENS_PER_BATCH = 2048


def _target_function(adapter: ModelAdapter, target: Target):
    """embeds [B, T, d] -> explained values [B] (logits only at the target position)."""

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        return target.value(forward_logits(adapter.model, embeds, [target.position])[:, 0])
    return forward


def embeds_of(adapter: ModelAdapter, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return adapter.embedding()(input_ids).detach()


def integrated_gradients(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target,
                         steps: int = IG_STEPS) -> torch.Tensor:
    """captum IntegratedGradients on the embeddings (zero baseline), summed over d: relevance [T] (float64)."""
    from captum.attr import IntegratedGradients

    embeds = embeds_of(adapter, input_ids)
    batch = max(1, TOKENS_PER_BATCH // input_ids.shape[1])
    with torch.enable_grad():
        attributions = IntegratedGradients(_target_function(adapter, target)).attribute(
            embeds, baselines=torch.zeros_like(embeds), n_steps=steps, internal_batch_size=batch)
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
