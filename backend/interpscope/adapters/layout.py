"""Where a model family keeps each part, declared as data: attribute paths, not code.

A `Layout` names the modules every method asks an adapter for (embedding, blocks, attention and its q/k/v/o
projections, the MLP's parts, the norms, the unembedding) as dotted attribute paths from the model, a block, its
attention or its MLP. `ModelAdapter` reads any family's modules through its layout, so a family whose modules sit
where Llama's do is a table entry (`LLAMA` with its own model types, `register_family` in interpscope.adapters);
an adapter class overrides a method only for a real quirk (fused q/k/v or gate/up projections, sandwich norms,
a parallel residual read from the config).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Layout:
    """Dotted attribute paths; None where the family has no such part.

    core: from the model to the decoder stack (None: the model itself). embedding, position_embedding, blocks,
    final_norm: from the core. unembedding: from the model (None: the model's get_output_embeddings()). attention,
    mlp, mixer and the block norms (sandwich norms included): from a block. q, k, v, o and qk_norms: from the
    attention module. activation, up, down: from the MLP. heads: the config field holding the number of attention
    heads; head_dim: the config field of the head width, when the family may set one unlike d_model / heads.
    conv1d: the MLP's down projection stores its weight as [in, out] (GPT-2's Conv1D) rather than nn.Linear's
    [out, in].
    """

    core: str | None
    embedding: str | None
    blocks: str
    final_norm: str
    unembedding: str | None = None
    position_embedding: str | None = None
    attention: str | None = None
    q: str | None = None
    k: str | None = None
    v: str | None = None
    o: str | None = None
    qk_norms: tuple[str, ...] = ()
    mlp: str | None = None
    activation: str | None = None
    up: str | None = None
    down: str | None = None
    mixer: str | None = None
    attention_norm: str | None = None
    mlp_norm: str | None = None
    attention_output_norm: str | None = None
    mlp_output_norm: str | None = None
    heads: str = "num_attention_heads"
    head_dim: str | None = None
    conv1d: bool = False

    def but(self, **changes: Any) -> Layout:
        """This layout with some paths changed (a family that differs from another in a few names)."""
        return replace(self, **changes)


def at(root: Any, path: str | None) -> Any:
    """The object at a dotted attribute path under `root` (None for no path)."""
    if path is None:
        return None
    for part in path.split("."):
        root = getattr(root, part)
    return root


# Llama, SmolLM2, Qwen2, Qwen3, Mistral, and every family built on their decoder layer.
LLAMA = Layout(core="model", embedding="embed_tokens", blocks="layers", final_norm="norm", attention="self_attn",
               q="q_proj", k="k_proj", v="v_proj", o="o_proj", qk_norms=("q_norm", "k_norm"), mlp="mlp",
               activation="act_fn", up="up_proj", down="down_proj", attention_norm="input_layernorm",
               mlp_norm="post_attention_layernorm", head_dim="head_dim")
# Gemma 3 (and 2): Llama's names plus a norm on each sub-layer's output; the MLP reads its own pre-norm.
GEMMA_SANDWICH = LLAMA.but(mlp_norm="pre_feedforward_layernorm", attention_output_norm="post_attention_layernorm",
                           mlp_output_norm="post_feedforward_layernorm")
# Phi-3: Llama's names, fused q/k/v and gate/up projections (their parts are the adapter's quirk).
PHI3 = LLAMA.but(q=None, k=None, v=None, activation="activation_fn", up="gate_up_proj")
GPT2 = Layout(core="transformer", embedding="wte", position_embedding="wpe", blocks="h", final_norm="ln_f",
              attention="attn", o="c_proj", mlp="mlp", activation="act", down="c_proj", attention_norm="ln_1",
              mlp_norm="ln_2", heads="n_head", conv1d=True)
NEOX = Layout(core="gpt_neox", embedding="embed_in", blocks="layers", final_norm="final_layer_norm",
              attention="attention", o="dense", mlp="mlp", activation="act",
              down="dense_4h_to_h", attention_norm="input_layernorm", mlp_norm="post_attention_layernorm")
MAMBA = Layout(core="backbone", embedding="embeddings", blocks="layers", final_norm="norm_f", mixer="mixer",
               attention_norm="norm")
# ViT / DeiT: the core is named by the model's base_model_prefix (the adapter's quirk); no token embedding.
VIT = Layout(core=None, embedding=None, blocks="layers", final_norm="layernorm", unembedding="classifier",
             attention="attention", q="q_proj", k="k_proj", v="v_proj", o="o_proj", mlp="mlp",
             activation="activation_fn", down="fc2", attention_norm="layernorm_before", mlp_norm="layernorm_after")
