"""Per-architecture adapters. Adding a family = one adapter file + its entry in ADAPTERS (or register_adapter)."""
from __future__ import annotations

from torch import nn

from interpscope.adapters.base import FoldedNorm, HookSpec, ModelAdapter, NormSpec
from interpscope.adapters.gemma import GemmaAdapter
from interpscope.adapters.gpt2 import GPT2Adapter
from interpscope.adapters.llama import LlamaAdapter
from interpscope.adapters.mamba import MambaAdapter
from interpscope.adapters.neox import NeoXAdapter
from interpscope.adapters.olmo import OlmoAdapter
from interpscope.config import InterpscopeError

ADAPTERS: list[type[ModelAdapter]] = [LlamaAdapter, GemmaAdapter, OlmoAdapter, GPT2Adapter, NeoXAdapter,
                                      MambaAdapter]


def register_adapter(adapter_cls: type[ModelAdapter]) -> type[ModelAdapter]:
    """Add a family: its adapter claims its HF model_types (later registrations win a shared type)."""
    ADAPTERS.insert(0, adapter_cls)
    return adapter_cls


def family_of(model_type: str) -> str | None:
    """The adapter family for a HF config.model_type, or None when unsupported."""
    for adapter_cls in ADAPTERS:
        if model_type in adapter_cls.model_types:
            return adapter_cls.family
    return None


def get_adapter(model: nn.Module) -> ModelAdapter:
    """The adapter for a loaded Hugging Face causal LM."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for adapter_cls in ADAPTERS:
        if model_type in adapter_cls.model_types:
            return adapter_cls(model)
    supported = sorted(t for a in ADAPTERS for t in a.model_types)
    raise InterpscopeError(f"Unsupported model type {model_type!r}. Supported: {', '.join(supported)}.")


__all__ = ["ADAPTERS", "FoldedNorm", "HookSpec", "ModelAdapter", "NormSpec", "family_of", "get_adapter",
           "register_adapter"]
