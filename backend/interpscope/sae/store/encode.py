"""Run a model up to an SAE's hook point and encode what it reads there.

The forward pass stops right after the hook (an exception raised inside the hook), so a store over a middle-layer
SAE costs half a forward pass per token.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from interpscope.capture import StopForward, hooks, model_lock
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.folder import check_compatible
from interpscope.sinks import zero_sink_features

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@torch.no_grad()
def hook_activations(lm: LoadedModel, hook_name: str, input_ids: torch.Tensor) -> torch.Tensor:
    """Activations [B, T, d] at hook_name for input_ids [B, T] (the caller holds model_lock(loaded))."""
    captured: dict[str, torch.Tensor] = {}

    def grab(tensor: torch.Tensor):
        captured["x"] = tensor.detach()
        raise StopForward

    try:
        with hooks(lm.adapter, {hook_name: grab}):
            lm.model(input_ids=input_ids.to(lm.device), use_cache=False)
    except StopForward:
        pass
    if "x" not in captured:
        raise RuntimeError(f"the hook {hook_name} was never reached")
    return captured["x"]


@torch.no_grad()
def encode_with_sinks(lm: LoadedModel, sae: SparseAutoencoder, input_ids: torch.Tensor,
                      hook_name: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SAE feature activations [B, T, d_sae] (float32, CPU) for input_ids [B, T], zero at massive-activation
    positions (interpscope.sae.sinks), and the mask [B, T - 1] of those positions among 1..T-1."""
    hook = check_compatible(sae, lm.adapter, hook_name, lm.name)
    with model_lock(lm):
        x = hook_activations(lm, hook, input_ids)
    x = x.to(device=sae.W_enc.device, dtype=sae.W_enc.dtype)
    features = sae.encode(x)
    sinks = zero_sink_features(x, features)
    return features.float().cpu(), sinks.cpu()


def encode_ids(lm: LoadedModel, sae: SparseAutoencoder, input_ids: torch.Tensor,
               hook_name: str | None = None) -> torch.Tensor:
    """SAE feature activations [B, T, d_sae] (float32, CPU) for input_ids [B, T] (zero at sinks past position 0)."""
    return encode_with_sinks(lm, sae, input_ids, hook_name)[0]
