"""The one place that knows where things live inside a model family.

Every method (relevance rules, SAE hooks, neuron analyses, Fourier lenses) asks an adapter for modules and
weights; none hard-codes attribute paths. Hook points use TransformerLens's canonical names so SAE folders
written for that ecosystem resolve here too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from interpscope.adapters.layout import Layout, at
from interpscope.config import InterpscopeError

HookKind = Literal["pre", "post"]

_BLOCK_HOOK = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_mid|hook_resid_post|hook_attn_out|"
                         r"hook_mlp_out|hook_mixer_out|mlp\.hook_in|mlp\.hook_post|attn\.hook_z)$")


@dataclass(frozen=True)
class NormSpec:
    """How a family's normalisation computes: y = centre(x) / sqrt(mean(centre(x)^2) + eps) * gamma + beta.

    centred: LayerNorm removes the mean first, RMSNorm does not. weight_offset: Gemma's RMSNorm multiplies by
    (1 + weight), so its gamma is weight + 1. A module without a weight has gamma 1 (OLMo's LayerNorm).
    """

    centred: bool
    weight_offset: float = 0.0
    default_eps: float = 1e-5

    @property
    def kind(self) -> str:
        return "layernorm" if self.centred else "rmsnorm"


RMSNORM = NormSpec(centred=False, default_eps=1e-6)
LAYERNORM = NormSpec(centred=True, default_eps=1e-5)


@dataclass
class FoldedNorm:
    """One norm module as plain tensors: gamma [d] (offset applied; ones when weightless), beta [d] or None, eps.

    normed = gamma * centre(x) / scale(x) + beta, with `scale` replaceable by a frozen one (the direct effect)."""

    spec: NormSpec
    gamma: torch.Tensor
    beta: torch.Tensor | None
    eps: float

    @property
    def centres(self) -> bool:
        return self.spec.centred

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The per-position divisor [...]: sqrt(mean square of centre(x) + eps)."""
        return torch.sqrt(self.centre(x).pow(2).mean(-1) + self.eps)

    def apply(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """The norm's output; with `scale` given, that scale is used instead of x's own (frozen norm)."""
        scale = self.scale(x) if scale is None else scale
        out = self.gamma * self.centre(x) / scale.unsqueeze(-1)
        return out + self.beta if self.beta is not None else out


@dataclass(frozen=True)
class HookSpec:
    """Where a named activation is read: the input ('pre') or output ('post') of `module`."""

    name: str
    module: nn.Module
    kind: HookKind


def weight_of(module: nn.Module) -> torch.Tensor:
    """A linear-like module's weight (torch types attribute reads as Tensor | Module)."""
    weight = module.weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"{type(module).__name__}.weight is not a tensor")
    return weight


class ModelAdapter:
    """Base adapter: every module lookup reads the family's `layout` (interpscope.adapters.layout); a family without
    one, or with a quirk the layout cannot say, overrides the lookup."""

    family: str = "unknown"
    model_types: tuple[str, ...] = ()
    norm: NormSpec = LAYERNORM
    has_attention: bool = True
    has_mlp: bool = True
    gated_mlp: bool = False
    parallel_residual: bool = False
    lrp_exact: bool = True  # False when the family computes something no LRP rule covers (e.g. clamped q/k/v)
    modality: str = "text"  # what the model reads: "text" (token ids) or "image" (pixels: ViT, DeiT)
    final_logit_softcap: float | None = None  # logits = cap * tanh(raw / cap) after the unembedding (Gemma 2)
    scaled_embedding: bool = False  # the embedding module multiplies its rows by a constant (Gemma's sqrt(d_model))
    layout: Layout | None = None  # where the family keeps each part; None: the family overrides every lookup

    def __init__(self, model: nn.Module):
        # A Hugging Face causal LM. Adapters walk its submodules by attribute name (model.model.layers), which torch
        # types as `Tensor | Module`; the family adapter is what knows the layout, so the walk is typed Any.
        self.model: Any = model
        self.config: Any = model.config  # the family's PretrainedConfig: its field names differ per family

    def _layout(self) -> Layout:
        if self.layout is None:
            raise NotImplementedError(f"{type(self).__name__} declares no layout and does not override this lookup")
        return self.layout

    def _core(self) -> Any:
        """The decoder stack (the model itself when the layout names no core)."""
        core = self._layout().core
        return self.model if core is None else at(self.model, core)

    def _in_block(self, layer: int, path: str | None) -> Any:
        return None if path is None else at(self._block(layer), path)

    def _block(self, layer: int) -> Any:
        """Block `layer`, typed Any like the model: its submodules are reached by the family's names."""
        return self.blocks()[layer]

    def _attn(self, layer: int) -> Any:
        return self.attention(layer)

    def _mlp(self, layer: int) -> Any:
        return self.mlp(layer)

    # --- sizes ---------------------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    @property
    def d_model(self) -> int:
        return int(self.embedding().weight.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(weight_of(self.unembedding()).shape[0])

    @property
    def n_heads(self) -> int:
        field = self.layout.heads if self.layout is not None else "num_attention_heads"
        return int(getattr(self.config, field, 0) or 0)

    @property
    def d_head(self) -> int:
        field = self.layout.head_dim if self.layout is not None else None
        declared = getattr(self.config, field, None) if field else None
        return int(declared) if declared else (self.d_model // self.n_heads if self.n_heads else 0)

    @property
    def d_mlp(self) -> int:
        return int(self.W_out(0).shape[0]) if self.has_mlp else 0

    # --- modules (from the layout; override for a quirk) --------------------------------------------------
    def embedding(self) -> nn.Embedding:
        path = self._layout().embedding
        if path is None:
            raise InterpscopeError(f"{self.family} models have no token embedding.")
        return at(self._core(), path)

    def position_embedding(self) -> nn.Embedding | None:
        return None if self.layout is None else at(self._core(), self.layout.position_embedding)

    def blocks(self) -> nn.ModuleList:
        return at(self._core(), self._layout().blocks)

    def attention(self, layer: int) -> nn.Module | None:
        return None if self.layout is None else self._in_block(layer, self.layout.attention)

    def attention_projections(self, layer: int) -> dict[str, nn.Module]:
        """The attention's separate projections the layout names, by part ('q', 'k', 'v', 'o')."""
        attn = self.attention(layer)
        parts = {"q": self._layout().q, "k": self._layout().k, "v": self._layout().v, "o": self._layout().o}
        return {name: at(attn, path) for name, path in parts.items() if path is not None and attn is not None}

    def mlp(self, layer: int) -> nn.Module | None:
        return None if self.layout is None else self._in_block(layer, self.layout.mlp)

    def _in_mlp(self, layer: int, path: str | None) -> Any:
        mlp = self.mlp(layer)
        return None if path is None or mlp is None else at(mlp, path)

    def mlp_down(self, layer: int) -> nn.Module | None:
        """The MLP's output projection: its input is the neuron activations."""
        return None if self.layout is None else self._in_mlp(layer, self.layout.down)

    def mixer(self, layer: int) -> nn.Module | None:
        """State-space mixer (Mamba)."""
        return None if self.layout is None else self._in_block(layer, self.layout.mixer)

    def attention_norm(self, layer: int) -> nn.Module | None:
        """The norm applied to the residual before attention (or the mixer)."""
        return None if self.layout is None else self._in_block(layer, self.layout.attention_norm)

    def mlp_norm(self, layer: int) -> nn.Module | None:
        return None if self.layout is None else self._in_block(layer, self.layout.mlp_norm)

    def final_norm(self) -> nn.Module:
        return at(self._core(), self._layout().final_norm)

    # --- pieces the relevance rules wrap (from the layout; override where a family fuses them) ----------------
    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        """Modules whose outputs hold queries, keys and values, each with the output-feature indices of every part.

        Separate projections give one module per part; fused ones (GPT-2 c_attn, NeoX query_key_value) one module
        with three index sets, so a rule can scale or detach each part of the same output.
        """
        parts = self.attention_projections(layer) if self.layout is not None else {}
        return [(parts[name], {name: torch.arange(weight_of(parts[name]).shape[0])})
                for name in ("q", "k", "v") if name in parts]

    def attention_out_proj(self, layer: int) -> nn.Module | None:
        """The attention output projection: its input is the heads' outputs, concatenated head by head."""
        if self.layout is None or self.layout.o is None:
            return None
        attn = self.attention(layer)
        return None if attn is None else at(attn, self.layout.o)

    def mlp_activation(self, layer: int) -> nn.Module | None:
        """The MLP's elementwise nonlinearity module (SiLU, GELU)."""
        return None if self.layout is None else self._in_mlp(layer, self.layout.activation)

    def mlp_up(self, layer: int) -> nn.Module | None:
        """Gated MLPs only: the linear branch multiplied with the activated gate."""
        return None if self.layout is None else self._in_mlp(layer, self.layout.up)

    def mlp_activations(self, layer: int) -> list[nn.Module]:
        """Every elementwise nonlinearity of the layer's MLPs that a rule wraps: the MLP's own, plus any extra MLP a
        family runs beside it (a mixture of experts' shared expert)."""
        activation = self.mlp_activation(layer)
        return [] if activation is None else [activation]

    def mlp_up_parts(self, layer: int) -> list[tuple[nn.Module, torch.Tensor | None]]:
        """Gated MLPs: each module holding the linear branch, with the output-feature indices of that branch (None:
        all of its output). A fused gate/up projection (Phi-3's gate_up_proj) names only its up half, so the uniform
        rule of the gated product scales the up half and leaves the gate half to the activation's rule."""
        up = self.mlp_up(layer)
        return [] if up is None else [(up, None)]

    def multiplicative_gates(self, layer: int) -> list[nn.Module]:
        """Modules whose output only gates another branch by multiplication (Qwen2-MoE's sigmoid shared-expert
        gate): both LRP methods detach them, so relevance follows the gated branch."""
        return []

    def experts(self, layer: int) -> nn.Module | None:
        """A mixture of experts' fused experts module (all experts' weights as 3D tensors), or None (dense layer)."""
        return None

    def attention_output_norm(self, layer: int) -> nn.Module | None:
        """A norm on the attention's output before it joins the residual (Gemma 2/3 'sandwich' norms)."""
        return None if self.layout is None else self._in_block(layer, self.layout.attention_output_norm)

    def mlp_output_norm(self, layer: int) -> nn.Module | None:
        """A norm on the MLP's output before it joins the residual (Gemma 2/3)."""
        return None if self.layout is None else self._in_block(layer, self.layout.mlp_output_norm)

    def qk_norms(self, layer: int) -> list[nn.Module]:
        """Norms applied to queries and keys inside attention (Qwen3, Gemma 3, OLMo 2)."""
        attn = self.attention(layer) if self.layout is not None else None
        if attn is None:
            return []
        return [norm for name in self._layout().qk_norms if (norm := getattr(attn, name, None)) is not None]

    def norms(self) -> list[nn.Module]:
        """Every normalisation module (per-block, sandwich, query/key and final norms), for the LRP norm rule."""
        found: list[nn.Module] = []
        for layer in range(self.n_layers):
            for norm in (self.attention_norm(layer), self.attention_output_norm(layer), self.mlp_norm(layer),
                         self.mlp_output_norm(layer), *self.qk_norms(layer)):
                if norm is not None:
                    found.append(norm)
        found.append(self.final_norm())
        return found

    # --- how norms compute: the one place that knows (LRP rule, neuron folding, SAE logit weights) -------------
    def norm_spec(self, module: nn.Module) -> NormSpec:
        """How `module` normalises; the family's kind unless a family mixes kinds."""
        return self.norm

    def norm_eps(self, module: nn.Module) -> float:
        for attr in ("variance_epsilon", "eps"):
            value = getattr(module, attr, None)
            if value is not None:
                return float(value)
        return self.norm_spec(module).default_eps

    def norm_gamma(self, module: nn.Module) -> torch.Tensor | None:
        """The effective gain (weight + the family's offset), or None when the module multiplies by nothing."""
        spec = self.norm_spec(module)
        weight = getattr(module, "weight", None)
        if weight is None:
            return None
        return weight + spec.weight_offset if spec.weight_offset else weight

    def norm_forward(self, module: nn.Module, x: torch.Tensor, detach_scale: bool = False) -> torch.Tensor:
        """What `module` computes on x, written out (same operation order as the HF modules); with detach_scale
        the normaliser carries no gradient: the LRP identity rule, exactly linear in the backward pass."""
        spec = self.norm_spec(module)
        source = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        centred = source - source.mean(-1, keepdim=True) if spec.centred else source
        square = (centred.detach() if detach_scale else centred).pow(2).mean(-1, keepdim=True)
        y = centred * torch.rsqrt(square + self.norm_eps(module))
        gamma = self.norm_gamma(module)
        if gamma is not None:
            y = y * gamma.to(y.dtype)
        bias = getattr(module, "bias", None)
        if bias is not None:
            y = y + bias.to(y.dtype)
        return y.to(x.dtype)

    def folded_norm(self, module: nn.Module | None = None) -> FoldedNorm:
        """A norm (default: the final norm) as plain tensors, gamma always present (ones when weightless)."""
        module = self.final_norm() if module is None else module
        gamma = self.norm_gamma(module)
        gamma = torch.ones(self.d_model, device=self.W_U().device) if gamma is None else gamma.detach()
        bias = getattr(module, "bias", None)
        return FoldedNorm(spec=self.norm_spec(module), gamma=gamma, beta=None if bias is None else bias.detach(),
                          eps=self.norm_eps(module))

    def folded_unembedding(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """W_U [d_model, vocab] with the final norm's gamma folded in: what a residual direction does to logits
        (the norm's scale left out: one positive number per position, it reorders no token)."""
        W_U = self.W_U().detach().to(dtype)
        return self.folded_norm().gamma.to(device=W_U.device, dtype=dtype)[:, None] * W_U

    def unembedding(self) -> nn.Module:
        path = self._layout().unembedding
        return self.model.get_output_embeddings() if path is None else at(self.model, path)

    # --- weights -------------------------------------------------------------------------------------
    def W_out(self, layer: int) -> torch.Tensor:
        """MLP output weights as [d_mlp, d_model]: row n is neuron n's write direction."""
        down = self.mlp_down(layer)
        if down is None:
            raise InterpscopeError(f"{self.family} models have no MLP output projection in layer {layer}.")
        return weight_of(down) if self._layout().conv1d else weight_of(down).T

    def b_out(self, layer: int) -> torch.Tensor | None:
        bias = getattr(self.mlp_down(layer), "bias", None)
        return bias

    def W_U(self) -> torch.Tensor:
        """Unembedding as [d_model, vocab]."""
        return weight_of(self.unembedding()).T

    def b_U(self) -> torch.Tensor | None:
        return getattr(self.unembedding(), "bias", None)

    def W_E(self) -> torch.Tensor:
        """Token embeddings as [vocab, d_model]."""
        return self.embedding().weight

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
                names.append(f"blocks.{layer}.mlp.hook_in")
                names.append(f"blocks.{layer}.mlp.hook_post")
                names.append(f"blocks.{layer}.hook_mlp_out")
            names.append(f"blocks.{layer}.hook_resid_post")
        names.append("ln_final.hook_normalized")
        return names

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
            "hook_attn_out": (self.attention_output_norm(layer) or self.attention(layer), "post"),
            "hook_resid_mid": (None if self.parallel_residual else self.mlp_norm(layer), "pre"),
            "hook_mlp_out": (self.mlp_output_norm(layer) or self.mlp(layer), "post"),
            "hook_mixer_out": (self.mixer(layer), "post"),
            "mlp.hook_in": (self.mlp(layer), "pre"),  # what the MLP reads: after its norm (a transcoder's input)
            "mlp.hook_post": (self.mlp_down(layer), "pre"),
            # the heads' outputs, concatenated head by head: what the output projection reads (Gemma Scope's attn_out)
            "attn.hook_z": (self.attention_out_proj(layer), "pre"),
        }
        module, kind = lookup[point]
        if module is None:
            raise InterpscopeError(f"{self.family} models have no {point} (asked for {name!r}).")
        return HookSpec(name, module, kind)

    def capabilities(self) -> frozenset[str]:
        """What this model offers, for methods to declare what they need (never a family name):
        'attention', 'mlp_neurons', 'gated_mlp', 'transformer_lrp' (the pieces the AttnLRP/CP-LRP rules wrap),
        'state_space' (a Mamba mixer), 'position_embedding', 'linear_replay' (attribution graphs' transcoder
        replay models its blocks exactly)."""
        found = set()
        if self.has_attention:
            found.add("attention")
        if self.has_mlp:
            found.add("mlp_neurons")
        if self.gated_mlp:
            found.add("gated_mlp")
        if self.position_embedding() is not None:
            found.add("position_embedding")
        if self.n_layers and self.mixer(0) is not None:
            found.add("state_space")
        if (self.lrp_exact and self.has_attention and self.n_layers and self.attention_qkv(0)
                and self.attention_out_proj(0) is not None and self.mlp_activation(0) is not None):
            found.add("transformer_lrp")
        if self._replays_linearly():
            found.add("linear_replay")
        return frozenset(found)

    def _replays_linearly(self) -> bool:
        """What the attribution graph's linear replay (interpscope.graphs.replay) models exactly: RMSNorm before
        attention and a dense gated MLP, a sequential residual, separate q/k/v/o projections (the frozen patterns
        are applied through v and o), token embeddings scaled by at most a constant (Gemma), norms on the
        sub-layers' outputs frozen like the others (Gemma 3's sandwich norms; with an attention bias they are not
        modelled), and logits that are not soft-capped (Gemma 2)."""
        if self.layout is None or not (self.n_layers and self.has_attention and self.has_mlp and self.gated_mlp):
            return False
        if self.norm.centred or self.parallel_residual or self.final_logit_softcap:
            return False
        if any(self.experts(layer) is not None for layer in range(self.n_layers)):  # a mixture of experts anywhere
            return False
        projections = self.attention_projections(0)
        if set(projections) != {"q", "k", "v", "o"}:
            return False
        biased = any(getattr(projections[name], "bias", None) is not None for name in ("v", "o"))
        return not (biased and self.attention_output_norm(0) is not None)

    def describe(self) -> dict:
        """Facts for a model card."""
        return {
            "family": self.family,
            "layers": self.n_layers,
            "d_model": self.d_model,
            "heads": self.n_heads,
            "d_mlp": self.d_mlp,
            "vocab": self.vocab_size,
            "norm": self.norm.kind + (" (gain 1 + w)" if self.norm.weight_offset else ""),
        }
