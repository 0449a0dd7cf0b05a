"""Per-architecture adapters. A family whose modules sit where a known layout says (interpscope.adapters.layout) is one
call of register_family, a table entry; a family with a quirk is one adapter file (a subclass overriding only the
quirk) + its entry in ADAPTERS (or register_adapter)."""
from __future__ import annotations

from typing import Any

from torch import nn

from interpscope.adapters.base import RMSNORM, FoldedNorm, HookSpec, ModelAdapter, NormSpec
from interpscope.adapters.gemma import Gemma2Adapter, GemmaAdapter
from interpscope.adapters.gpt2 import GPT2Adapter
from interpscope.adapters.layout import Layout
from interpscope.adapters.llama import LlamaAdapter
from interpscope.adapters.mamba import MambaAdapter
from interpscope.adapters.moe import MixtralAdapter, OlmoeAdapter, Qwen2MoeAdapter, Qwen3MoeAdapter
from interpscope.adapters.neox import NeoXAdapter
from interpscope.adapters.olmo import OlmoAdapter
from interpscope.adapters.phi3 import Phi3Adapter
from interpscope.adapters.t5 import T5Adapter
from interpscope.adapters.vit import ViTAdapter
from interpscope.config import InterpscopeError

ADAPTERS: list[type[ModelAdapter]] = [LlamaAdapter, GemmaAdapter, OlmoAdapter, GPT2Adapter, NeoXAdapter,
                                      MambaAdapter,
                                      MixtralAdapter, Qwen2MoeAdapter, Qwen3MoeAdapter, OlmoeAdapter, Phi3Adapter,
                                      Gemma2Adapter, T5Adapter, ViTAdapter]


def register_adapter(adapter_cls: type[ModelAdapter]) -> type[ModelAdapter]:
    """Add a family: its adapter claims its HF model_types (later registrations win a shared type)."""
    ADAPTERS.insert(0, adapter_cls)
    return adapter_cls


def register_family(family: str, model_types: tuple[str, ...], layout: Layout, norm: NormSpec = RMSNORM,
                    **facts: Any) -> type[ModelAdapter]:
    """Add a family from data alone: its name, the HF model types it claims, where its modules sit (a Layout, e.g.
    layout.LLAMA for a Llama-like decoder), its norm and any other fact the adapter declares (gated_mlp=True,
    scaled_embedding=...). Returns the adapter class, registered like an adapter file's."""
    unknown = sorted(set(facts) - {name for name in vars(ModelAdapter) if not name.startswith("_")})
    if unknown:
        raise ValueError(f"Unknown adapter facts for family {family!r}: {', '.join(unknown)}.")
    attributes = {"family": family, "model_types": tuple(model_types), "layout": layout, "norm": norm, **facts}
    return register_adapter(type(f"{family.title().replace('_', '')}Adapter", (ModelAdapter,), attributes))


def family_of(model_type: str) -> str | None:
    """The adapter family for a HF config.model_type, or None when unsupported."""
    for adapter_cls in ADAPTERS:
        if model_type in adapter_cls.model_types:
            return adapter_cls.family
    return None


def modality_of(model_type: str) -> str | None:
    """What a HF config.model_type's family reads ("text" or "image"), or None when unsupported."""
    for adapter_cls in ADAPTERS:
        if model_type in adapter_cls.model_types:
            return adapter_cls.modality
    return None


def get_adapter(model: nn.Module) -> ModelAdapter:
    """The adapter for a loaded Hugging Face causal LM."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for adapter_cls in ADAPTERS:
        if model_type in adapter_cls.model_types:
            return adapter_cls(model)
    supported = sorted(t for a in ADAPTERS for t in a.model_types)
    raise InterpscopeError(f"Unsupported model type {model_type!r}. Supported: {', '.join(supported)}.")


__all__ = ["ADAPTERS", "FoldedNorm", "HookSpec", "Layout", "ModelAdapter", "NormSpec", "family_of", "get_adapter",
           "modality_of", "register_adapter", "register_family"]
