"""The one place that knows where things live inside a model family.

Every method (relevance rules, SAE hooks, neuron analyses, Fourier lenses) asks an adapter for modules and
weights; none hard-codes attribute paths. Hook points use TransformerLens's canonical names so SAE folders
written for that ecosystem resolve here too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from backend.config import InterpscopeError

HookKind = Literal["pre", "post"]

_BLOCK_HOOK = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_mid|hook_resid_post|hook_attn_out|"
                         r"hook_mlp_out|hook_mixer_out|mlp\.hook_post)$")


@dataclass(frozen=True)
class HookSpec:
    """Where a named activation is read: the input ('pre') or output ('post') of `module`."""

    name: str
    module: nn.Module
    kind: HookKind


class ModelAdapter:
    """Base adapter. Subclasses fill in the family-specific module lookups."""

    family: str = "unknown"
    norm_kind: Literal["rmsnorm", "layernorm"] = "layernorm"
    has_attention: bool = True
    has_mlp: bool = True

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config

    # --- sizes ---------------------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    @property
    def d_model(self) -> int:
        return int(self.embedding().weight.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.unembedding().weight.shape[0])

    @property
    def n_heads(self) -> int:
        return int(getattr(self.config, "num_attention_heads", 0) or 0)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads if self.n_heads else 0

    @property
    def d_mlp(self) -> int:
        return int(self.W_out(0).shape[0]) if self.has_mlp else 0

    # --- modules (override) --------------------------------------------------------------------------
    def embedding(self) -> nn.Embedding:
        raise NotImplementedError

    def position_embedding(self) -> nn.Embedding | None:
        return None

    def blocks(self) -> nn.ModuleList:
        raise NotImplementedError

    def attention(self, layer: int) -> nn.Module | None:
        return None

    def mlp(self, layer: int) -> nn.Module | None:
        return None

    def mlp_down(self, layer: int) -> nn.Module | None:
        """The MLP's output projection: its input is the neuron activations."""
        return None

    def mixer(self, layer: int) -> nn.Module | None:
        """State-space mixer (Mamba)."""
        return None

    def attention_norm(self, layer: int) -> nn.Module | None:
        """The norm applied to the residual before attention (or the mixer)."""
        return None

    def mlp_norm(self, layer: int) -> nn.Module | None:
        return None

    def final_norm(self) -> nn.Module:
        raise NotImplementedError

    # --- pieces the relevance rules wrap (override where the family has them) -------------------------
    gated_mlp: bool = False

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """Modules whose outputs hold queries, keys and values, each with the output-feature indices of every part.

        Separate projections give one module per part; fused ones (GPT-2 c_attn, NeoX query_key_value) one module
        with three index sets, so a rule can scale or detach each part of the same output.
        """
        return []

    def attention_out_proj(self, layer: int) -> nn.Module | None:
        """The attention output projection: its input is the heads' outputs, concatenated head by head."""
        return None

    def mlp_activation(self, layer: int) -> nn.Module | None:
        """The MLP's elementwise nonlinearity module (SiLU, GELU)."""
        return None

    def mlp_up(self, layer: int) -> nn.Module | None:
        """Gated MLPs only: the linear branch multiplied with the activated gate."""
        return None

    def norms(self) -> list[nn.Module]:
        """Every residual-stream normalisation module (per-block norms and the final norm)."""
        found: list[nn.Module] = []
        for layer in range(self.n_layers):
            for norm in (self.attention_norm(layer), self.mlp_norm(layer)):
                if norm is not None:
                    found.append(norm)
        found.append(self.final_norm())
        return found

    def unembedding(self) -> nn.Module:
        raise NotImplementedError

    # --- weights -------------------------------------------------------------------------------------
    def W_out(self, layer: int) -> torch.Tensor:
        """MLP output weights as [d_mlp, d_model]: row n is neuron n's write direction."""
        raise NotImplementedError

    def b_out(self, layer: int) -> torch.Tensor | None:
        bias = getattr(self.mlp_down(layer), "bias", None)
        return bias

    def W_U(self) -> torch.Tensor:
        """Unembedding as [d_model, vocab]."""
        return self.unembedding().weight.T

    def b_U(self) -> torch.Tensor | None:
        return getattr(self.unembedding(), "bias", None)

    def W_E(self) -> torch.Tensor:
        """Token embeddings as [vocab, d_model]."""
        return self.embedding().weight

    def final_norm_weight(self) -> torch.Tensor | None:
        return getattr(self.final_norm(), "weight", None)

    def final_norm_eps(self) -> float:
        norm = self.final_norm()
        for attr in ("variance_epsilon", "eps"):
            if hasattr(norm, attr):
                return float(getattr(norm, attr))
        return 1e-5

    # --- hook points ---------------------------------------------------------------------------------
    def hook_points(self) -> list[str]:
        """Every named activation this model offers, in forward order."""
        names = ["hook_embed"]
        if self.position_embedding() is not None:
            names.append("hook_pos_embed")
        for layer in range(self.n_layers):
            names.append(f"blocks.{layer}.hook_resid_pre")
            if self.has_attention:
                names.append(f"blocks.{layer}.hook_attn_out")
                if self.mlp_norm(layer) is not None and not self.parallel_residual:
                    names.append(f"blocks.{layer}.hook_resid_mid")
            if self.mixer(layer) is not None:
                names.append(f"blocks.{layer}.hook_mixer_out")
            if self.has_mlp:
                names.append(f"blocks.{layer}.mlp.hook_post")
                names.append(f"blocks.{layer}.hook_mlp_out")
            names.append(f"blocks.{layer}.hook_resid_post")
        names.append("ln_final.hook_normalized")
        return names

    parallel_residual: bool = False

    def resolve(self, name: str) -> HookSpec:
        """Map a TransformerLens-style hook name onto this model's module and read side."""
        if name == "hook_embed":
            return HookSpec(name, self.embedding(), "post")
        if name == "hook_pos_embed":
            pos = self.position_embedding()
            if pos is None:
                raise InterpscopeError(f"{self.family} models have no learned position embedding ({name}).")
            return HookSpec(name, pos, "post")
        if name in ("ln_final.hook_normalized", "hook_final_norm"):
            return HookSpec(name, self.final_norm(), "post")
        match = _BLOCK_HOOK.match(name)
        if not match:
            raise InterpscopeError(f"Unknown hook point {name!r}. Known: {', '.join(self.hook_points()[:8])}, ...")
        layer, point = int(match.group(1)), match.group(2)
        if not 0 <= layer < self.n_layers:
            raise InterpscopeError(f"Hook {name!r}: layer {layer} out of range; this model has {self.n_layers} layers.")
        block = self.blocks()[layer]
        lookup: dict[str, tuple[nn.Module | None, HookKind]] = {
            "hook_resid_pre": (block, "pre"),
            "hook_resid_post": (block, "post"),
            "hook_attn_out": (self.attention(layer), "post"),
            "hook_resid_mid": (None if self.parallel_residual else self.mlp_norm(layer), "pre"),
            "hook_mlp_out": (self.mlp(layer), "post"),
            "hook_mixer_out": (self.mixer(layer), "post"),
            "mlp.hook_post": (self.mlp_down(layer), "pre"),
        }
        module, kind = lookup[point]
        if module is None:
            raise InterpscopeError(f"{self.family} models have no {point} (asked for {name!r}).")
        return HookSpec(name, module, kind)

    def describe(self) -> dict:
        """Facts for a model card."""
        return {
            "family": self.family,
            "layers": self.n_layers,
            "d_model": self.d_model,
            "heads": self.n_heads,
            "d_mlp": self.d_mlp,
            "vocab": self.vocab_size,
            "norm": self.norm_kind,
        }
