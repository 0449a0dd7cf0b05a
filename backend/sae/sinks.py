"""Massive activations: tokens whose residual-stream norm is a hundred times or more the typical one.

Position 0 of every context is one (the attention sink). SmolLM2 sometimes puts the sink's massive activation on
later positions too: on position 1 after some first tokens (5 of the 297,561 cached training rows, all at position
1), and on every repeat of a repeated first token ("000 l., ..." gives three sinks at ~140x the median norm at
layer 15). An SAE is trained without them (they would dominate the reconstruction loss), so it is undefined there:
fed one, it can return a reconstruction ten times larger still. Everywhere an SAE reads activations, rows above
SINK_FACTOR x the median row norm are treated like position 0: dropped in training, left untouched and out of every
average in evaluation, never ranked in stores and prompt views.
"""
from __future__ import annotations

import torch

SINK_FACTOR = 10.0


def sink_rows(x: torch.Tensor, factor: float = SINK_FACTOR) -> torch.Tensor:
    """Bool mask over the rows of x [..., d]: True where a row's norm exceeds `factor` x the median row norm of x.

    The median is taken over every row given, so pass the rows of one batch without position 0."""
    norms = x.detach().float().norm(dim=-1)
    if norms.numel() == 0:
        return torch.zeros(norms.shape, dtype=torch.bool, device=x.device)
    return norms > factor * norms.flatten().median()


def zero_sink_features(x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """features [B, T, d_sae] of activations x [B, T, d] with every sink position from 1 on set to zero (in
    place; position 0 is the caller's business); returns the mask [B, T - 1] of the positions 1.. that were sinks."""
    mask = sink_rows(x[:, 1:])
    features[:, 1:][mask.to(features.device)] = 0.0
    return mask
