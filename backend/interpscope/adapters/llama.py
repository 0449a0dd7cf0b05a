"""Llama family: Llama, SmolLM2, Qwen2, Qwen3, Mistral (RMSNorm, gated SiLU MLP, rotary attention). Everything is
in the layout (interpscope.adapters.layout.LLAMA); the families built on this decoder layer subclass it."""
from __future__ import annotations

from interpscope.adapters.base import RMSNORM, ModelAdapter
from interpscope.adapters.layout import LLAMA


class LlamaAdapter(ModelAdapter):
    family = "llama"
    norm = RMSNORM
    model_types: tuple[str, ...] = ("llama", "qwen2", "mistral", "qwen3")
    gated_mlp = True
    layout = LLAMA
