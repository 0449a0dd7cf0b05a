"""Phi-3: Llama's layout with fused projections. `qkv_proj` writes [q | k | v] (grouped keys and values) and the
MLP's `gate_up_proj` writes [gate | up]; the adapter names each part's output indices, so the LRP rules scale q, k
and v of the one module separately and the uniform rule of the gated product reaches only the up half."""
from __future__ import annotations

import torch
from torch import nn

from interpscope.adapters.base import weight_of
from interpscope.adapters.layout import PHI3
from interpscope.adapters.llama import LlamaAdapter


class Phi3Adapter(LlamaAdapter):
    family = "phi3"
    model_types = ("phi3",)
    layout = PHI3

    def attention_projections(self, layer: int) -> dict[str, nn.Module]:
        attn = self._attn(layer)
        return {"qkv": attn.qkv_proj, "o": attn.o_proj}

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """qkv_proj's output: n_heads * d_head queries, then n_kv_heads * d_head keys, then as many values."""
        q_width = self.n_heads * self.d_head
        kv_width = int(getattr(self.config, "num_key_value_heads", None) or self.n_heads) * self.d_head
        parts = {"q": torch.arange(0, q_width), "k": torch.arange(q_width, q_width + kv_width),
                 "v": torch.arange(q_width + kv_width, q_width + 2 * kv_width)}
        return [(self._attn(layer).qkv_proj, parts)]

    def mlp_up_parts(self, layer: int) -> list[tuple[nn.Module, torch.Tensor | None]]:
        """gate_up_proj's output is chunked [gate | up]: the up branch is its second half."""
        fused = self._mlp(layer).gate_up_proj
        width = int(weight_of(fused).shape[0])
        return [(fused, torch.arange(width // 2, width))]
