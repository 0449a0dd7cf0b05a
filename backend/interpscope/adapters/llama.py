"""Llama family: Llama, SmolLM2, Qwen2, Qwen3, Mistral (RMSNorm, gated SiLU MLP, rotary attention)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interpscope.adapters.base import RMSNORM, ModelAdapter, weight_of


class LlamaAdapter(ModelAdapter):
    family = "llama"
    norm = RMSNORM
    model_types: tuple[str, ...] = ("llama", "qwen2", "mistral", "qwen3")
    gated_mlp = True

    def _core(self) -> Any:
        return self.model.model

    def embedding(self) -> nn.Embedding:
        return self._core().embed_tokens

    def blocks(self) -> nn.ModuleList:
        return self._core().layers

    def attention(self, layer: int) -> nn.Module:
        return self._block(layer).self_attn

    def attention_projections(self, layer: int) -> dict[str, nn.Module]:
        attn = self._attn(layer)
        return {"q": attn.q_proj, "k": attn.k_proj, "v": attn.v_proj, "o": attn.o_proj}

    def mlp(self, layer: int) -> nn.Module:
        return self._block(layer).mlp

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        parts = self.attention_projections(layer)
        return [(parts[name], {name: torch.arange(weight_of(parts[name]).shape[0])}) for name in ("q", "k", "v")]

    def qk_norms(self, layer: int) -> list[nn.Module]:
        attn = self.attention(layer)
        return [norm for norm in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)) if norm is not None]

    def attention_out_proj(self, layer: int) -> nn.Module:
        return self._attn(layer).o_proj

    def mlp_activation(self, layer: int) -> nn.Module | None:
        return self._mlp(layer).act_fn

    def mlp_up(self, layer: int) -> nn.Module | None:
        return self._mlp(layer).up_proj

    def mlp_down(self, layer: int) -> nn.Module | None:
        return self._mlp(layer).down_proj

    def attention_norm(self, layer: int) -> nn.Module:
        return self._block(layer).input_layernorm

    def mlp_norm(self, layer: int) -> nn.Module:
        return self._block(layer).post_attention_layernorm

    def final_norm(self) -> nn.Module:
        return self._core().norm

    def unembedding(self) -> nn.Module:
        return self.model.lm_head

    def W_out(self, layer: int) -> torch.Tensor:
        return weight_of(self._mlp(layer).down_proj).T

    @property
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    @property
    def d_head(self) -> int:
        return int(getattr(self.config, "head_dim", None) or self.d_model // self.n_heads)
