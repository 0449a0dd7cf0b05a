"""GPT-NeoX family (Pythia): LayerNorm, rotary, fused QKV, usually a parallel residual."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interpscope.adapters.base import LAYERNORM, ModelAdapter, weight_of


class NeoXAdapter(ModelAdapter):
    family = "gpt_neox"
    norm = LAYERNORM
    model_types = ("gpt_neox",)

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.parallel_residual = bool(getattr(self.config, "use_parallel_residual", True))

    def _core(self) -> Any:
        return self.model.gpt_neox

    def embedding(self) -> nn.Embedding:
        return self._core().embed_in

    def blocks(self) -> nn.ModuleList:
        return self._core().layers

    def attention(self, layer: int) -> nn.Module:
        return self._block(layer).attention

    def mlp(self, layer: int) -> nn.Module:
        return self._block(layer).mlp

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """query_key_value's output is laid out head by head as [q_h | k_h | v_h], each d_head wide."""
        d_head, n_heads = self.d_head, self.n_heads
        base = torch.arange(n_heads)[:, None] * 3 * d_head
        offsets = torch.arange(d_head)[None, :]
        parts = {name: (base + i * d_head + offsets).reshape(-1) for i, name in enumerate(("q", "k", "v"))}
        return [(self._attn(layer).query_key_value, parts)]

    def attention_out_proj(self, layer: int) -> nn.Module:
        return self._attn(layer).dense

    def mlp_activation(self, layer: int) -> nn.Module:
        return self._mlp(layer).act

    def mlp_down(self, layer: int) -> nn.Module:
        return self._mlp(layer).dense_4h_to_h

    def attention_norm(self, layer: int) -> nn.Module:
        return self._block(layer).input_layernorm

    def mlp_norm(self, layer: int) -> nn.Module:
        return self._block(layer).post_attention_layernorm

    def final_norm(self) -> nn.Module:
        return self._core().final_layer_norm

    def unembedding(self) -> nn.Module:
        return self.model.get_output_embeddings()

    def W_out(self, layer: int) -> torch.Tensor:
        return weight_of(self.mlp_down(layer)).T
