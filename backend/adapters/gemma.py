"""Gemma family: Llama's layout with RMSNorm scaling by (1 + weight), GELU-tanh gated MLPs, embeddings scaled by
sqrt(d_model) inside the embedding module, and (Gemma 3) 'sandwich' norms on each sub-layer's output plus query/key
norms. Gemma 2, whose logits and attention scores are soft-capped by tanh, is not claimed: no LRP rule covers the
caps.
"""
from __future__ import annotations

from torch import nn

from interpscope.adapters.base import NormSpec
from interpscope.adapters.llama import LlamaAdapter


class GemmaAdapter(LlamaAdapter):
    family = "gemma"
    norm = NormSpec(centred=False, weight_offset=1.0, default_eps=1e-6)
    model_types = ("gemma", "gemma3_text")

    def _sandwich(self, layer: int) -> bool:
        return hasattr(self._block(layer), "pre_feedforward_layernorm")

    def mlp_norm(self, layer: int) -> nn.Module:
        block = self._block(layer)
        return block.pre_feedforward_layernorm if self._sandwich(layer) else block.post_attention_layernorm

    def attention_output_norm(self, layer: int) -> nn.Module | None:
        return self._block(layer).post_attention_layernorm if self._sandwich(layer) else None

    def mlp_output_norm(self, layer: int) -> nn.Module | None:
        return self._block(layer).post_feedforward_layernorm if self._sandwich(layer) else None
