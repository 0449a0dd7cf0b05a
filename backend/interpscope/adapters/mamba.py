"""Mamba (HF MambaForCausalLM): RMSNorm blocks around a selective state-space mixer; no attention, no MLP."""
from __future__ import annotations

from interpscope.adapters.base import RMSNORM, ModelAdapter
from interpscope.adapters.layout import MAMBA


class MambaAdapter(ModelAdapter):
    family = "mamba"
    norm = RMSNORM
    has_attention = False
    has_mlp = False
    model_types = ("mamba",)
    layout = MAMBA

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
