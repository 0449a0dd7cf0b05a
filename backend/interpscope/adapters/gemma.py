"""Gemma family: Llama's layout with RMSNorm scaling by (1 + weight), GELU-tanh gated MLPs, embeddings scaled by
sqrt(d_model) inside the embedding module, and (Gemma 3) 'sandwich' norms on each sub-layer's output plus query/key
norms. Gemma 2 (Gemma2Adapter) adds tanh soft-caps on the logits and on the attention scores.
"""
from __future__ import annotations

from torch import nn

from interpscope.adapters.base import NormSpec
from interpscope.adapters.layout import GEMMA_SANDWICH
from interpscope.adapters.llama import LlamaAdapter


class GemmaAdapter(LlamaAdapter):
    family = "gemma"
    norm = NormSpec(centred=False, weight_offset=1.0, default_eps=1e-6)
    model_types: tuple[str, ...] = ("gemma", "gemma3_text")
    scaled_embedding = True

    def __init__(self, model: nn.Module):
        super().__init__(model)
        # the quirk: Gemma 2 and 3 put a norm on each sub-layer's output ('sandwich' norms), Gemma 1 does not
        if hasattr(self._block(0), "pre_feedforward_layernorm"):
            self.layout = GEMMA_SANDWICH


class Gemma2Adapter(GemmaAdapter):
    """Gemma 2: sandwich norms like Gemma 3 (no query/key norms), logits soft-capped as cap * tanh(raw / cap) and
    attention scores soft-capped the same way before the softmax.

    The logit cap is covered exactly: the rules give it the identity rule of an elementwise nonlinearity (the raw
    logit receives the capped logit as relevance; interpscope.relevance.gates.LogitSoftcapRule). The attention cap
    sits between q.k and the softmax: CP-LRP sends no relevance through q and k, so it never meets the cap, while
    AttnLRP propagates through it with its native gradient, and what that loses is booked with the softmax share
    (the conservation readout's per-layer softmax term is everything that leaves between the heads and q/k/v).
    """

    family = "gemma2"
    model_types = ("gemma2",)

    def __init__(self, model: nn.Module):
        super().__init__(model)
        cap = getattr(self.config, "final_logit_softcapping", None)
        self.final_logit_softcap = float(cap) if cap else None
