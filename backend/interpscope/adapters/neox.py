"""GPT-NeoX family (Pythia): LayerNorm, rotary, usually a parallel residual (read from the config). Its quirk: one
fused query_key_value projection laid out head by head."""
from __future__ import annotations

import torch
from torch import nn

from interpscope.adapters.base import LAYERNORM, ModelAdapter
from interpscope.adapters.layout import NEOX


class NeoXAdapter(ModelAdapter):
    family = "gpt_neox"
    norm = LAYERNORM
    model_types = ("gpt_neox",)
    layout = NEOX

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.parallel_residual = bool(getattr(self.config, "use_parallel_residual", True))

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """query_key_value's output is laid out head by head as [q_h | k_h | v_h], each d_head wide."""
        d_head, n_heads = self.d_head, self.n_heads
        base = torch.arange(n_heads)[:, None] * 3 * d_head
        offsets = torch.arange(d_head)[None, :]
        parts = {name: (base + i * d_head + offsets).reshape(-1) for i, name in enumerate(("q", "k", "v"))}
        return [(self._attn(layer).query_key_value, parts)]
