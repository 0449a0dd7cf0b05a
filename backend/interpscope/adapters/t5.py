"""T5 family (T5, Flan-T5): an encoder-decoder with T5LayerNorm (RMS, no mean, no bias), a relative position bias added
to the attention scores, self-attention in both stacks plus cross-attention in the decoder, and a ReLU MLP
(DenseReluDense) or a gated-GELU one (Flan-T5: act(wi_0 x) * wi_1 x). With tied embeddings the decoder output is
multiplied by d_model ** -0.5 before lm_head (a constant: it passes relevance on unchanged).

The two stacks are laid out as one list of blocks: encoder blocks 0..E-1, then decoder blocks E..E+D-1, so the LRP
rules, which walk `range(n_layers)`, reach every norm, activation, gated branch and q/k/v projection (cross-attention's
too) without knowing about the two stacks. The relative position bias is constant w.r.t. the input: it receives no
relevance (interpscope.relevance.seq2seq books what AttnLRP's softmaxes leave on it, and CP-LRP detaches it).

The decoder-only relevance engine does not serve this family (it feeds one token sequence): the adapter declares
'encoder_decoder' and not 'transformer_lrp', and interpscope.relevance.seq2seq explains it.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interpscope.adapters.base import RMSNORM, ModelAdapter, weight_of


class T5Adapter(ModelAdapter):
    family = "t5"
    norm = RMSNORM
    model_types: tuple[str, ...] = ("t5",)

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.gated_mlp = bool(getattr(self.config, "is_gated_act", False))
        self._blocks = nn.ModuleList([*self.model.encoder.block, *self.model.decoder.block])

    # --- the two stacks -------------------------------------------------------------------------------
    @property
    def n_encoder_layers(self) -> int:
        return len(self.model.encoder.block)

    @property
    def n_decoder_layers(self) -> int:
        return len(self.model.decoder.block)

    def is_decoder_layer(self, layer: int) -> bool:
        return layer >= self.n_encoder_layers

    def encoder_final_norm(self) -> nn.Module:
        return self.model.encoder.final_layer_norm

    def middle_block(self, decoder: bool) -> nn.Module:
        """The block whose output the sinks are measured at: the middle block of the encoder or of the decoder."""
        stack = self.model.decoder if decoder else self.model.encoder
        return stack.block[len(stack.block) // 2]

    def position_bias_modules(self) -> list[nn.Module]:
        """The relative-position-bias embeddings (self-attention of each stack's first block; every later block
        reuses their output)."""
        found = []
        for stack in (self.model.encoder, self.model.decoder):
            attn = stack.block[0].layer[0].SelfAttention
            if getattr(attn, "has_relative_attention_bias", False):
                found.append(attn.relative_attention_bias)
        return found

    def attentions(self, layer: int) -> list[tuple[str, Any]]:
        """('self', module) and, in a decoder block, ('cross', module): each T5Attention with its q, k, v, o."""
        block = self._block(layer)
        found = [("self", block.layer[0].SelfAttention)]
        if self.is_decoder_layer(layer):
            found.append(("cross", block.layer[1].EncDecAttention))
        return found

    @property
    def decoder_start_token_id(self) -> int:
        start = getattr(self.config, "decoder_start_token_id", None)
        return int(start if start is not None else self.config.pad_token_id)

    @property
    def output_scale(self) -> float:
        """What the decoder output is multiplied by before lm_head: d_model ** -0.5 with tied embeddings, else 1."""
        scaled = getattr(self.config, "scale_decoder_outputs", getattr(self.config, "tie_word_embeddings", False))
        return float(self.config.d_model) ** -0.5 if scaled else 1.0

    # --- modules --------------------------------------------------------------------------------------
    def embedding(self) -> nn.Embedding:
        return self.model.shared

    def blocks(self) -> nn.ModuleList:
        return self._blocks

    def attention(self, layer: int) -> nn.Module:
        return self._block(layer).layer[0].SelfAttention

    def mlp(self, layer: int) -> nn.Module:
        return self._block(layer).layer[-1].DenseReluDense

    def attention_qkv(self, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
        found: list[tuple[nn.Module, dict[str, torch.Tensor]]] = []
        for _, attn in self.attentions(layer):
            for part in ("q", "k", "v"):
                module = getattr(attn, part)
                found.append((module, {part: torch.arange(weight_of(module).shape[0])}))
        return found

    def attention_out_proj(self, layer: int) -> nn.Module:
        return self._block(layer).layer[0].SelfAttention.o

    def mlp_activation(self, layer: int) -> nn.Module:
        return self._mlp(layer).act

    def mlp_up(self, layer: int) -> nn.Module | None:
        return self._mlp(layer).wi_1 if self.gated_mlp else None

    def mlp_down(self, layer: int) -> nn.Module:
        return self._mlp(layer).wo

    def attention_norm(self, layer: int) -> nn.Module:
        return self._block(layer).layer[0].layer_norm

    def cross_attention_norm(self, layer: int) -> nn.Module | None:
        return self._block(layer).layer[1].layer_norm if self.is_decoder_layer(layer) else None

    def mlp_norm(self, layer: int) -> nn.Module:
        return self._block(layer).layer[-1].layer_norm

    def final_norm(self) -> nn.Module:
        return self.model.decoder.final_layer_norm

    def norms(self) -> list[nn.Module]:
        """Every T5LayerNorm: per block (before self-attention, cross-attention and the MLP) and both final norms."""
        found: list[nn.Module] = []
        for layer in range(self.n_layers):
            found += [n for n in (self.attention_norm(layer), self.cross_attention_norm(layer), self.mlp_norm(layer))
                      if n is not None]
        return [*found, self.encoder_final_norm(), self.final_norm()]

    def norm_forward(self, module: nn.Module, x: torch.Tensor, detach_scale: bool = False) -> torch.Tensor:
        """T5LayerNorm as transformers computes it: the mean square in float32 whatever the input's dtype (so a
        float64 model's norms are float32-precise), x * rsqrt(. + eps), cast to a half weight's dtype, times weight."""
        weight = weight_of(module)
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        if detach_scale:
            variance = variance.detach()
        y = x * torch.rsqrt(variance + self.norm_eps(module))
        if weight.dtype in (torch.float16, torch.bfloat16):
            y = y.to(weight.dtype)
        return weight * y

    def unembedding(self) -> nn.Module:
        return self.model.lm_head

    def W_out(self, layer: int) -> torch.Tensor:
        return weight_of(self.mlp_down(layer)).T

    @property
    def n_heads(self) -> int:
        return int(self.config.num_heads)

    @property
    def d_head(self) -> int:
        return int(self.config.d_kv)

    def capabilities(self) -> frozenset[str]:
        """'encoder_decoder' (the seq2seq relevance engine's), 'attention', 'mlp_neurons', 'gated_mlp' (Flan-T5);
        never 'transformer_lrp', whose engine runs decoder-only models."""
        found = {"encoder_decoder", "attention", "mlp_neurons"}
        if self.gated_mlp:
            found.add("gated_mlp")
        return frozenset(found)

    def describe(self) -> dict:
        info = super().describe()
        act = str(self.config.dense_act_fn)
        info.update({"encoder_layers": self.n_encoder_layers, "decoder_layers": self.n_decoder_layers,
                     "mlp": f"gated {act}" if self.gated_mlp else act, "position": "relative bias",
                     "output_scale": self.output_scale})
        return info
