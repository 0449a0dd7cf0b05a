"""Mamba (HF MambaForCausalLM): RMSNorm blocks around a selective state-space mixer; no attention, no MLP."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from interpscope.adapters.base import RMSNORM, ModelAdapter

if TYPE_CHECKING:
    from transformers.models.mamba.modeling_mamba import MambaMixer, MambaRMSNorm


class MambaAdapter(ModelAdapter):
    family = "mamba"
    norm = RMSNORM
    has_attention = False
    has_mlp = False
    model_types = ("mamba",)

    def _core(self) -> Any:
        return self.model.backbone

    def embedding(self) -> nn.Embedding:
        return self._core().embeddings

    def blocks(self) -> nn.ModuleList:
        return self._core().layers

    def mixer(self, layer: int) -> MambaMixer:
        return self._block(layer).mixer

    def attention_norm(self, layer: int) -> MambaRMSNorm:
        return self._block(layer).norm

    def final_norm(self) -> MambaRMSNorm:
        return self._core().norm_f

    def unembedding(self) -> nn.Module:
        return self.model.lm_head

    @property
    def n_heads(self) -> int:
        return 0

    @property
    def d_state(self) -> int:
        return int(self.config.state_size)

    @property
    def d_inner(self) -> int:
        return int(self.config.intermediate_size)

    def describe(self) -> dict:
        info = super().describe()
        info.update({"d_state": self.d_state, "d_inner": self.d_inner})
        return info
