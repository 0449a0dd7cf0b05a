"""GPT-2 family: LayerNorm, learned positions, Conv1D projections (weights stored [in, out]). Its quirk: one fused
c_attn projection writes [q | k | v]."""
from __future__ import annotations

import torch
from torch import nn

from interpscope.adapters.base import LAYERNORM, ModelAdapter
from interpscope.adapters.layout import GPT2


class GPT2Adapter(ModelAdapter):
    family = "gpt2"
    norm = LAYERNORM
    model_types = ("gpt2",)
    layout = GPT2

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """c_attn's output is [q | k | v], each d_model wide."""
        width = self.d_model
        return [(self._attn(layer).c_attn,
                 {name: torch.arange(i * width, (i + 1) * width) for i, name in enumerate(("q", "k", "v"))})]
