"""One registry of tiny random models: every family the README claims, each with the capabilities its adapter must
declare. tests/test_families.py runs the same checks over all of them, so a claimed family cannot go untested.

A model is 2 layers wide enough to have several heads (and experts); float64 builds run the eager attention and eager
experts loops (transformers' grouped_mm experts kernel takes float32 only), float32 builds keep each family's
default implementations (SDPA, grouped_mm): what a user's model runs. Norm gains, biases and routers are
re-randomised so that nothing sits at an initial value that would hide a mistake (a gain of exactly 1, zero biases,
a zero router that ties every expert).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers as hf

VOCAB = 64
_IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)
_DECODER = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, **_IDS)
_MOE = dict(num_experts_per_tok=2)
_TRANSFORMER = frozenset({"attention", "transformer_lrp"})
_DENSE = _TRANSFORMER | {"mlp_neurons", "gated_mlp"}
_SPARSE = _TRANSFORMER | {"experts", "gated_mlp"}


@dataclass(frozen=True)
class Family:
    """A family's tiny model: its HF classes and config, the adapter family that must claim it and the
    capabilities that adapter must declare."""

    name: str
    config_cls: Any
    model_cls: Any
    config: dict
    adapter_family: str
    capabilities: frozenset[str]
    gain_centre: float = 1.0  # Gemma's norms multiply by (1 + w): their w is drawn around 0

    def build(self, dtype: torch.dtype = torch.float64, seed: int = 0, init_range: float = 0.3,
              **overrides: Any) -> Any:
        """The tiny model in eval mode; `overrides` change config fields (e.g. vocab_size for a real tokenizer)."""
        torch.manual_seed(seed)
        config = self.config_cls(initializer_range=init_range, **{**self.config, **overrides})
        if dtype == torch.float64:
            config._attn_implementation = "eager"
            if hasattr(config, "_experts_implementation"):
                config._experts_implementation = "eager"
        model = self.model_cls(config).to(dtype).eval()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("bias"):
                    param.normal_(0.0, 0.2)
                elif param.dim() == 1 and name.endswith("weight"):
                    param.normal_(self.gain_centre, 0.2)
                elif param.dim() >= 2 and not bool(param.any()):
                    param.normal_(0.0, init_range)
        return model


def _family(name: str, config_cls: Any, model_cls: Any, adapter_family: str, capabilities: frozenset[str],
            gain_centre: float = 1.0, **overrides: Any) -> Family:
    return Family(name, config_cls, model_cls, {**_DECODER, **overrides}, adapter_family, frozenset(capabilities),
                  gain_centre)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    _family("llama", hf.LlamaConfig, hf.LlamaForCausalLM, "llama", _DENSE),
    # SmolLM2's shape: 3 query heads sharing one key/value head, tied embeddings
    _family("smollm2", hf.LlamaConfig, hf.LlamaForCausalLM, "llama", _DENSE, hidden_size=24, num_attention_heads=3,
            num_key_value_heads=1, tie_word_embeddings=True),
    _family("qwen2", hf.Qwen2Config, hf.Qwen2ForCausalLM, "llama", _DENSE),  # q/k/v biases
    _family("qwen3", hf.Qwen3Config, hf.Qwen3ForCausalLM, "llama", _DENSE, head_dim=8),  # per-head q/k norms
    _family("mistral", hf.MistralConfig, hf.MistralForCausalLM, "llama", _DENSE, sliding_window=4),
    _family("gemma", hf.GemmaConfig, hf.GemmaForCausalLM, "gemma", _DENSE, gain_centre=0.0, head_dim=8),
    _family("gemma2", hf.Gemma2Config, hf.Gemma2ForCausalLM, "gemma2", _DENSE, gain_centre=0.0, head_dim=8,
            query_pre_attn_scalar=8, sliding_window=4, final_logit_softcapping=3.0, attn_logit_softcapping=5.0),
    _family("gemma3", hf.Gemma3TextConfig, hf.Gemma3ForCausalLM, "gemma", _DENSE, gain_centre=0.0, head_dim=8,
            query_pre_attn_scalar=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    _family("olmo", hf.OlmoConfig, hf.OlmoForCausalLM, "olmo", _DENSE),
    _family("phi3", hf.Phi3Config, hf.Phi3ForCausalLM, "phi3", _DENSE),  # fused qkv_proj and gate_up_proj
    _family("mixtral", hf.MixtralConfig, hf.MixtralForCausalLM, "mixtral", _SPARSE, num_local_experts=4, **_MOE),
    _family("qwen2_moe", hf.Qwen2MoeConfig, hf.Qwen2MoeForCausalLM, "qwen2_moe", _SPARSE, num_experts=4,
            moe_intermediate_size=16, shared_expert_intermediate_size=24, norm_topk_prob=False, **_MOE),
    # one dense layer beside a sparse one (mlp_only_layers), renormalised top-k weights
    _family("qwen3_moe", hf.Qwen3MoeConfig, hf.Qwen3MoeForCausalLM, "qwen3_moe", _SPARSE, num_experts=4,
            moe_intermediate_size=16, head_dim=8, norm_topk_prob=True, mlp_only_layers=[0], **_MOE),
    _family("olmoe", hf.OlmoeConfig, hf.OlmoeForCausalLM, "olmoe", _SPARSE, num_experts=4, **_MOE),
    Family("gpt2", hf.GPT2Config, hf.GPT2LMHeadModel,
           dict(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                attn_pdrop=0.0), "gpt2", _TRANSFORMER | {"mlp_neurons", "position_embedding"}),
    Family("pythia", hf.GPTNeoXConfig, hf.GPTNeoXForCausalLM,
           dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, rotary_pct=0.5, use_parallel_residual=True), "gpt_neox",
           _TRANSFORMER | {"mlp_neurons"}),
    Family("mamba", hf.MambaConfig, hf.MambaForCausalLM,
           dict(vocab_size=VOCAB, hidden_size=16, state_size=4, num_hidden_layers=2), "mamba",
           frozenset({"state_space"})),
]}

# Encoder-decoders: their relevance runs through interpscope.relevance.seq2seq (source + decoder input), so the
# decoder-only checks above do not apply; tests/test_t5.py runs the same laws over these.
ENCODER_DECODERS: dict[str, Family] = {"t5": Family(
    "t5", hf.T5Config, hf.T5ForConditionalGeneration,
    dict(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=4,
         relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
         feed_forward_proj="gated-gelu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
    "t5", frozenset({"encoder_decoder", "attention", "mlp_neurons", "gated_mlp"}))}

# The README's list of supported families, each with the registry entries that stand for it.
README_FAMILIES: dict[str, tuple[str, ...]] = {
    "Llama/SmolLM2": ("llama", "smollm2"), "Qwen2": ("qwen2",), "Qwen3": ("qwen3",), "Mistral": ("mistral",),
    "Gemma/Gemma 2/Gemma 3": ("gemma", "gemma2", "gemma3"), "OLMo": ("olmo",), "Phi-3": ("phi3",), "GPT-2": ("gpt2",),
    "GPT-NeoX/Pythia": ("pythia",), "Mamba": ("mamba",), "Mixtral": ("mixtral",), "Qwen2-MoE": ("qwen2_moe",),
    "Qwen3-MoE": ("qwen3_moe",), "OLMoE": ("olmoe",),
}

BUILDERS: dict[str, Callable[..., Any]] = {name: family.build for name, family in FAMILIES.items()}


def tiny_ids(length: int = 9, seed: int = 1) -> torch.Tensor:
    """Token ids avoiding the special ids 0-2."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, length), generator=generator)
