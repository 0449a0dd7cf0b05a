"""MambaLRP readouts: conservation accounting (incl. the conv1d bias share), the conservation error with each fix
switched off in turn, and relevance against distance from the predicted position over a set of prompts."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from interpscope.adapters import ModelAdapter, get_adapter
from interpscope.capture import model_lock
from interpscope.relevance.engine import forward_logits
from interpscope.relevance.mamba.forward import ALL_FIXES, FIX_NAMES, Fixes
from interpscope.relevance.mamba.rule import MambaLRPRule, _check_family, mamba_adapter, patched_modules
from interpscope.relevance.targets import Target

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class MambaConservation:
    """Where the explained value y went under one set of fixes.

    relevance: [T] per input token. conv_bias_sum: sum of b * dy/db over the conv1d biases (they absorb
    relevance, plain Gradient x Input); other_bias_sum: the same for every other bias (dt_proj; zero when the SSM
    parameters are detached). relative_error = |inputs + biases - y| / |y|.
    """

    fixes: list[str]
    target_logit: float
    relevance: np.ndarray
    input_sum: float
    conv_bias_sum: float
    other_bias_sum: float
    relative_error: float


def _adapter(model_or_lm: nn.Module | LoadedModel) -> ModelAdapter:
    return get_adapter(model_or_lm) if isinstance(model_or_lm, nn.Module) else model_or_lm.adapter


def _biases(adapter: ModelAdapter) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    mamba = mamba_adapter(adapter)
    conv = [bias for mixer in patched_modules(mamba)[0] if (bias := mixer.conv1d.bias) is not None]
    conv_ids = {id(b) for b in conv}
    other = [p for n, p in adapter.model.named_parameters() if n.endswith("bias") and id(p) not in conv_ids]
    return conv, other


def conservation(model_or_lm: nn.Module | LoadedModel, input_ids: torch.Tensor, target: Target,
                 fixes: Fixes = ALL_FIXES) -> MambaConservation:
    """One forward + backward under MambaLRP(fixes): relevance per token and the full accounting of y."""
    adapter = _adapter(model_or_lm)
    _check_family(adapter)
    conv, other = _biases(adapter)
    biases = conv + other
    with model_lock(model_or_lm), MambaLRPRule(fixes).apply(adapter), torch.enable_grad():
        flags = [b.requires_grad for b in biases]
        try:
            for bias in biases:
                bias.requires_grad_(True)
            embeds = adapter.embedding()(input_ids).detach().requires_grad_(True)
            value = target.value(forward_logits(adapter.model, embeds, [target.position])[0, 0])
            grads = torch.autograd.grad(value, [embeds, *biases], allow_unused=True)
        finally:
            for bias, flag in zip(biases, flags, strict=True):
                bias.requires_grad_(flag)

    def share(params: Sequence[torch.Tensor], param_grads) -> float:
        return float(sum(float((p.detach().double() * g.double()).sum())
                         for p, g in zip(params, param_grads, strict=True) if g is not None))

    relevance = (embeds.detach().double() * grads[0].double())[0].sum(-1)
    y = float(value.detach().double())
    conv_sum = share(conv, grads[1:1 + len(conv)])
    other_sum = share(other, grads[1 + len(conv):])
    input_sum = float(relevance.sum())
    error = abs(input_sum + conv_sum + other_sum - y) / (abs(y) or 1.0)
    return MambaConservation(fixes=fixes.active(), target_logit=y, relevance=relevance.cpu().numpy(),
                             input_sum=input_sum, conv_bias_sum=conv_sum, other_bias_sum=other_sum,
                             relative_error=error)


@dataclass
class FixAblation:
    """Conservation error with all fixes on, then with each fix switched off alone (and with none)."""

    labels: list[str]
    relative_errors: list[float]
    target_logit: float


def conservation_by_disabled_fix(model_or_lm: nn.Module | LoadedModel, input_ids: torch.Tensor,
                                  target: Target) -> FixAblation:
    """Why each rule is needed: the relative conservation error (biases counted) per disabled fix."""
    settings = [("all fixes on", Fixes())] + [(f"{name} off", Fixes().without(name)) for name in FIX_NAMES]
    settings.append(("no fixes (Gradient x Input)", Fixes.none()))
    results = [conservation(model_or_lm, input_ids, target, fixes) for _, fixes in settings]
    return FixAblation(labels=[label for label, _ in settings], relative_errors=[r.relative_error for r in results],
                       target_logit=results[0].target_logit)


@dataclass
class DistanceProfile:
    """Relevance against distance from the predicted position, over prompts.

    distance d = target position - token position (0 = the last input token). share: mean over prompts of
    |R_d| / sum |R| (each prompt weighs the same); signed: mean of R_d / sum |R|; counts: prompts reaching d.
    """

    distances: np.ndarray
    share: np.ndarray
    signed: np.ndarray
    counts: np.ndarray
    n_prompts: int


def relevance_by_distance(relevances: Sequence[np.ndarray], max_distance: int | None = None) -> DistanceProfile:
    """Aggregate per-token relevance maps (each ending at the predicted position) by distance from it."""
    if not relevances:
        raise ValueError("need at least one relevance map")
    longest = max(len(r) for r in relevances)
    span = longest if max_distance is None else min(longest, max_distance + 1)
    share_sum, signed_sum, counts = np.zeros(span), np.zeros(span), np.zeros(span, dtype=np.int64)
    for relevance in relevances:
        backwards = np.asarray(relevance, dtype=np.float64)[::-1][:span]
        total = np.abs(np.asarray(relevance, dtype=np.float64)).sum() or 1.0
        share_sum[: len(backwards)] += np.abs(backwards) / total
        signed_sum[: len(backwards)] += backwards / total
        counts[: len(backwards)] += 1
    safe = np.maximum(counts, 1)
    return DistanceProfile(distances=np.arange(span), share=share_sum / safe, signed=signed_sum / safe,
                           counts=counts, n_prompts=len(relevances))


def distance_profile(lm: LoadedModel, texts: Sequence[str], method: str = "mambalrp", max_distance: int | None = None,
                     progress: Callable[[int, int], None] | None = None) -> DistanceProfile:
    """Explain each text's predicted next token with `method` and aggregate relevance by distance."""
    from interpscope.relevance.api import explain

    maps = []
    for index, text in enumerate(texts):
        maps.append(explain(lm, text, method=method).relevance)
        if progress:
            progress(index + 1, len(texts))
    return relevance_by_distance(maps, max_distance)
