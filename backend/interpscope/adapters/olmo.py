"""OLMo (1): Llama's layout with a LayerNorm that has no weight and no bias (mean-centred, eps 1e-5).

`clip_qkv`, when a checkpoint sets it, clamps queries, keys and values: a nonlinearity no LRP rule covers, so such
models offer the gradient and captum methods only.
"""
from __future__ import annotations

from torch import nn

from interpscope.adapters.base import NormSpec
from interpscope.adapters.llama import LlamaAdapter


class OlmoAdapter(LlamaAdapter):
    family = "olmo"
    norm = NormSpec(centred=True, weight_offset=0.0, default_eps=1e-5)
    model_types = ("olmo",)

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.lrp_exact = getattr(self.config, "clip_qkv", None) is None
