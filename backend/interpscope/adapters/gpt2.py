"""GPT-2 family: LayerNorm, learned positions, Conv1D projections (weights stored [in, out])."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interpscope.adapters.base import LAYERNORM, ModelAdapter, weight_of


class GPT2Adapter(ModelAdapter):
    family = "gpt2"
    norm = LAYERNORM
    model_types = ("gpt2",)

    def _core(self) -> Any:
        return self.model.transformer

    def embedding(self) -> nn.Embedding:
        return self._core().wte

    def position_embedding(self) -> nn.Embedding:
        return self._core().wpe

    def blocks(self) -> nn.ModuleList:
        return self._core().h

    def attention(self, layer: int) -> nn.Module:
        return self._block(layer).attn

    def mlp(self, layer: int) -> nn.Module:
        return self._block(layer).mlp

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """c_attn's output is [q | k | v], each d_model wide."""
        width = self.d_model
        return [(self._attn(layer).c_attn,
                 {name: torch.arange(i * width, (i + 1) * width) for i, name in enumerate(("q", "k", "v"))})]

    def attention_out_proj(self, layer: int) -> nn.Module:
        return self._attn(layer).c_proj

    def mlp_activation(self, layer: int) -> nn.Module:
        return self._mlp(layer).act

    def mlp_down(self, layer: int) -> nn.Module:
        return self._mlp(layer).c_proj

    def attention_norm(self, layer: int) -> nn.Module:
        return self._block(layer).ln_1

    def mlp_norm(self, layer: int) -> nn.Module:
        return self._block(layer).ln_2

    def final_norm(self) -> nn.Module:
        return self._core().ln_f

    def unembedding(self) -> nn.Module:
        return self.model.lm_head

    def W_out(self, layer: int) -> torch.Tensor:
        return weight_of(self.mlp_down(layer))  # Conv1D: [d_mlp, d_model] already

    @property
    def n_heads(self) -> int:
        return int(self.config.n_head)
