"""Mixtures of experts on Llama's layout: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE.

Each sparse block holds a router (`mlp.gate`: linear -> softmax -> top-k, renormalised in Mixtral and where
`norm_topk_prob` is set) and one fused experts module (`mlp.experts`: every expert's [gate; up] and down weights as
3D parameters `gate_up_proj` [E, 2 * d_expert, d_model] and `down_proj` [E, d_model, d_expert]; transformers 5 runs it
through its `grouped_mm` implementation by default, so no per-expert module is ever called). Qwen2-MoE adds a
shared expert (a plain gated MLP) whose output is scaled by sigmoid(shared_expert_gate(x)). Qwen2-MoE and Qwen3-MoE
may keep some layers dense (`mlp_only_layers`, `decoder_sparse_step`): those layers answer like a Llama MLP.

The sparse layers have no dense neurons (there is no single input of a down projection to read), so these models
offer no 'mlp_neurons' capability; they offer 'experts' instead, which the per-expert relevance view needs.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interpscope.adapters.base import HookSpec, weight_of
from interpscope.adapters.llama import LlamaAdapter
from interpscope.config import InterpscopeError


class MoEAdapter(LlamaAdapter):
    family = "moe"
    model_types: tuple[str, ...] = ()

    def _sparse(self, layer: int) -> Any | None:
        mlp = self._mlp(layer)
        return mlp if hasattr(mlp, "experts") else None

    def sparse_layers(self) -> list[int]:
        """The layers whose MLP is a mixture of experts."""
        return [layer for layer in range(self.n_layers) if self._sparse(layer) is not None]

    def experts(self, layer: int) -> nn.Module | None:
        sparse = self._sparse(layer)
        return None if sparse is None else sparse.experts

    def router(self, layer: int) -> nn.Module | None:
        """The top-k router of a sparse layer (its weight is [n_experts, d_model])."""
        sparse = self._sparse(layer)
        return None if sparse is None else sparse.gate

    def shared_expert(self, layer: int) -> Any | None:
        sparse = self._sparse(layer)
        return None if sparse is None else getattr(sparse, "shared_expert", None)

    @property
    def n_experts(self) -> int:
        layers = self.sparse_layers()
        experts: Any = self.experts(layers[0]) if layers else None
        return int(experts.gate_up_proj.shape[0]) if experts is not None else 0

    @property
    def top_k(self) -> int:
        layers = self.sparse_layers()
        router: Any = self.router(layers[0]) if layers else None
        return int(router.top_k) if router is not None else 0

    @property
    def d_expert(self) -> int:
        layers = self.sparse_layers()
        experts: Any = self.experts(layers[0]) if layers else None
        return int(experts.down_proj.shape[-1]) if experts is not None else 0

    # --- dense parts: a dense layer's MLP, or a sparse layer's shared expert -----------------------------------
    def mlp_activation(self, layer: int) -> nn.Module | None:
        return None if self._sparse(layer) is not None else self._mlp(layer).act_fn

    def mlp_up(self, layer: int) -> nn.Module | None:
        return None if self._sparse(layer) is not None else self._mlp(layer).up_proj

    def mlp_down(self, layer: int) -> nn.Module | None:
        return None if self._sparse(layer) is not None else self._mlp(layer).down_proj

    def mlp_activations(self, layer: int) -> list[nn.Module]:
        shared = self.shared_expert(layer)
        return super().mlp_activations(layer) + ([shared.act_fn] if shared is not None else [])

    def mlp_up_parts(self, layer: int) -> list[tuple[nn.Module, torch.Tensor | None]]:
        shared = self.shared_expert(layer)
        return super().mlp_up_parts(layer) + ([(shared.up_proj, None)] if shared is not None else [])

    def multiplicative_gates(self, layer: int) -> list[nn.Module]:
        sparse = self._sparse(layer)
        gate = None if sparse is None else getattr(sparse, "shared_expert_gate", None)
        return [] if gate is None else [gate]

    def W_out(self, layer: int) -> torch.Tensor:
        down = self.mlp_down(layer)
        if down is None:
            raise InterpscopeError(f"Layer {layer} of this {self.family} model is a mixture of {self.n_experts} "
                                   "experts: it has no dense MLP neurons (no single down projection to read).")
        return weight_of(down).T

    @property
    def d_mlp(self) -> int:
        """The dense layers' MLP width (their `mlp.hook_post`), 0 when every layer is sparse."""
        sparse = set(self.sparse_layers())
        dense = [layer for layer in range(self.n_layers) if layer not in sparse]
        return int(self.W_out(dense[0]).shape[0]) if dense else 0

    # --- hook points and capabilities ----------------------------------------------------------------------------
    def hook_points(self) -> list[str]:
        """As every family, without `mlp.hook_post` on sparse layers (their experts have no shared neuron input)."""
        sparse = {f"blocks.{layer}.mlp.hook_post" for layer in self.sparse_layers()}
        return [name for name in super().hook_points() if name not in sparse]

    def resolve(self, name: str) -> HookSpec:
        if name.endswith("mlp.hook_post") and name in {f"blocks.{layer}.mlp.hook_post" for layer in
                                                        self.sparse_layers()}:
            raise InterpscopeError(f"{name!r}: that layer is a mixture of experts, with no dense MLP neurons.")
        return super().resolve(name)

    def capabilities(self) -> frozenset[str]:
        """The transformer capabilities plus 'experts'; 'mlp_neurons' only when no layer is sparse, and
        'transformer_lrp' from the attention's parts (a sparse layer 0 has no dense activation to wrap)."""
        found = set(super().capabilities())
        if self.sparse_layers():
            found.discard("mlp_neurons")
            found.add("experts")
            if (self.lrp_exact and self.n_layers and self.attention_qkv(0)
                    and self.attention_out_proj(0) is not None):
                found.add("transformer_lrp")
        return frozenset(found)

    def describe(self) -> dict:
        facts = super().describe()
        if self.sparse_layers():
            facts.update(experts=self.n_experts, top_k=self.top_k, d_expert=self.d_expert,
                         sparse_layers=len(self.sparse_layers()))
        return facts


class MixtralAdapter(MoEAdapter):
    family = "mixtral"
    model_types = ("mixtral",)


class Qwen2MoeAdapter(MoEAdapter):
    family = "qwen2_moe"
    model_types = ("qwen2_moe",)


class Qwen3MoeAdapter(MoEAdapter):
    family = "qwen3_moe"
    model_types = ("qwen3_moe",)


class OlmoeAdapter(MoEAdapter):
    """OLMoE: its query/key RMSNorms act on the whole projection (not per head); Llama's lookup finds them."""

    family = "olmoe"
    model_types = ("olmoe",)
