"""MambaLRP as a relevance rule: the pure-PyTorch mixer and RMSNorm forwards swapped in on ONE model instance.

`MambaLRPRule(fixes).apply(adapter)` is a context manager (the relevance engine's Rule protocol): on entry every
mixer and RMSNorm of that instance runs interpscope.relevance.mamba.forward with the chosen fixes, through
interpscope.capture.override_forward, which swaps the forward for the current run only (other sessions keep the
plain forward); on exit, also after an exception, the class's own forward is back. Classes are never patched.
Callers hold the model's lock (`mamba_lrp` does both).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from interpscope.adapters import ModelAdapter, get_adapter
from interpscope.adapters.mamba import MambaAdapter
from interpscope.capture import model_lock, override_forward
from interpscope.config import InterpscopeError
from interpscope.relevance.mamba.forward import ALL_FIXES, Fixes, mixer_forward, rmsnorm

if TYPE_CHECKING:
    from transformers.models.mamba.modeling_mamba import MambaMixer, MambaRMSNorm

    from interpscope.models.loaded import LoadedModel


def _check_family(adapter: ModelAdapter) -> None:
    if "state_space" not in adapter.capabilities():
        raise InterpscopeError(f"MambaLRP explains state-space (Mamba) models; this {adapter.family} model has no "
                               "selective-SSM mixer.")


def _mixer_forward(mixer: MambaMixer, fixes: Fixes, original: Callable) -> Callable:
    def forward(hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs):
        if cache is not None:
            return original(hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask[:, :, None].to(hidden_states.dtype)
        return mixer_forward(mixer, hidden_states, fixes)
    return forward


def _norm_forward(norm: MambaRMSNorm, fixes: Fixes) -> Callable:
    def forward(hidden_states: torch.Tensor):
        return rmsnorm(norm, hidden_states, fixes.norm)
    return forward


def mamba_adapter(adapter: ModelAdapter) -> MambaAdapter:
    """The adapter as the Mamba adapter, after the family check (the Mamba adapter is the one with a mixer)."""
    _check_family(adapter)
    if not isinstance(adapter, MambaAdapter):
        raise InterpscopeError(f"MambaLRP explains state-space (Mamba) models; this {adapter.family} model's "
                               "adapter is not the Mamba one.")
    return adapter


def patched_modules(adapter: MambaAdapter) -> tuple[list[MambaMixer], list[MambaRMSNorm]]:
    """The mixers and the RMSNorms (each block's, then the final one) the rule replaces, found through the adapter."""
    mixers = [cast("MambaMixer", adapter.mixer(layer)) for layer in range(adapter.n_layers)]  # the layout's modules
    norms = [cast("MambaRMSNorm", adapter.attention_norm(layer)) for layer in range(adapter.n_layers)]
    return mixers, norms + [cast("MambaRMSNorm", adapter.final_norm())]


class MambaLRPRule:
    """MambaLRP (Rezaei Jafari et al. 2024) with each of its four fixes switchable; Fixes.none() = plain
    Gradient x Input through the same pure-PyTorch forward (the cost and conservation reference)."""

    def __init__(self, fixes: Fixes = ALL_FIXES):
        self.fixes = fixes
        self.name = "mambalrp(" + ",".join(fixes.active() or ["none"]) + ")"

    @contextmanager
    def _patched(self, adapter: ModelAdapter) -> Iterator[None]:
        mixers, norms = patched_modules(mamba_adapter(adapter))
        with ExitStack() as stack:
            for mixer in mixers:
                original = type(mixer).forward.__get__(mixer)
                stack.enter_context(override_forward(mixer, _mixer_forward(mixer, self.fixes, original)))
            for norm in norms:
                stack.enter_context(override_forward(norm, _norm_forward(norm, self.fixes)))
            yield

    def apply(self, adapter: ModelAdapter):
        return self._patched(adapter)


def mambalrp_rules(adapter: ModelAdapter, fixes: Fixes = ALL_FIXES) -> list[MambaLRPRule]:
    """The rule list for the relevance engine (methods registry entry 'mambalrp')."""
    _check_family(adapter)
    return [MambaLRPRule(fixes)]


@contextmanager
def mamba_lrp(model_or_lm: nn.Module | LoadedModel, fixes: Fixes = ALL_FIXES) -> Iterator[ModelAdapter]:
    """Hold the model's lock and apply MambaLRP with `fixes` to that instance for the `with` block."""
    adapter = get_adapter(model_or_lm) if isinstance(model_or_lm, nn.Module) else model_or_lm.adapter
    with model_lock(model_or_lm), MambaLRPRule(fixes).apply(adapter):
        yield adapter
