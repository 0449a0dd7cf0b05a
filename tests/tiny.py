"""Every tiny random model the tests build, from one table: `FAMILIES`, keyed by family name.

A row holds a family's Hugging Face classes, the adapter family that must claim it, the capabilities that adapter
must declare, and the config of each build the tests make of it, one clearly named column per build. One function
(`_make`) turns a row's column into a model: the seed, the config, the attention (and experts) implementation, the
model in its dtype, in eval mode; each build then re-randomises what its checks need.

- `config`, built by `Family.build`: the registry (2 layers, d 16, vocab 64) of every family the README claims.
  tests/models/test_families.py runs the same checks over all of them, so a claimed family cannot go untested.
  float64 builds run the eager attention and eager experts loops (transformers' grouped_mm experts kernel takes
  float32 only), float32 builds keep each family's default implementations (SDPA, grouped_mm): what a user's model
  runs. Norm gains, biases and routers are re-randomised so that nothing sits at an initial value that would hide a
  mistake (a gain of exactly 1, zero biases, a zero router that ties every expert).
- `small`, built by `small_model` (tiny_llama, tiny_gpt2, ... and `FACTORIES`): d 32, vocab 128 (GPT-2: its real
  50257), float32, as initialised; for tests that need real module structure but no particular weights.
- `lrp`, built by `relevance_model`: d 16, vocab 64, float64, the attention implementation asked for, biases and
  norm gains re-randomised (or biases zeroed): the relevance checks.
- `neurons`, built by `neuron_model`: the widths asked for and an embedding large enough for confident predictions;
  `plant_entropy_neuron` then plants the ground truth the entropy-neuron finder and ablation are checked against.

`ENCODER_DECODERS` (T5, the same two builds: `config` and `small` via `tiny_t5`) and `IMAGE_CLASSIFIERS` (ViT, DeiT:
`tiny_vit`) are the models that are no causal LM.
"""
from __future__ import annotations

import io
import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers as hf

from interpscope.adapters import get_adapter
from interpscope.adapters.base import weight_of
from interpscope.entropy_neurons.folding import final_norm, output_norm

VOCAB = 64  # the registry and relevance builds
GPT2_VOCAB = 50257  # GPT-2's real tokenizer
_IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)
_TRANSFORMER = frozenset({"attention", "transformer_lrp"})
_DENSE = _TRANSFORMER | {"mlp_neurons", "gated_mlp"}
_REPLAYED = _DENSE | {"linear_replay"}  # Llama/Gemma-style blocks: the attribution graph's linear replay models them
_SPARSE = _TRANSFORMER | {"experts", "gated_mlp"}
_MOE = dict(num_experts_per_tok=2)

# the decoder widths of each build, before what a family adds
_D16 = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64)
_DECODER = {**_D16, "num_key_value_heads": 2, "tie_word_embeddings": False, **_IDS}  # the registry build
_SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=128)
_GPT2 = dict(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0)
_NEOX = {**_D16, "rotary_pct": 0.5, "use_parallel_residual": True}
_GEMMA3 = dict(head_dim=8, query_pre_attn_scalar=8, sliding_window=4,
               layer_types=["sliding_attention", "full_attention"])


@dataclass(frozen=True)
class Family:
    """A family's row: its HF classes, the adapter family that must claim it and the capabilities that adapter must
    declare, and one config per build (None where the tests make no such build of it)."""

    name: str
    config_cls: Any
    model_cls: Any
    config: dict  # the registry build (Family.build)
    adapter_family: str
    capabilities: frozenset[str]
    gain_centre: float = 1.0  # Gemma's norms multiply by (1 + w): their w is drawn around 0
    small: dict | None = None  # small_model: float32, as initialised
    lrp: dict | None = None  # relevance_model: float64, biases and gains re-randomised
    # neuron_model: the config for (vocab_size, d_model, n_layers, d_mlp, n_heads)
    neurons: Callable[[int, int, int, int, int], dict] | None = None

    def build(self, dtype: torch.dtype = torch.float64, seed: int = 0, init_range: float = 0.3,
              **overrides: Any) -> Any:
        """The tiny model in eval mode; `overrides` change config fields (e.g. vocab_size for a real tokenizer)."""
        eager = "eager" if dtype == torch.float64 else None
        model = _make(self, {"initializer_range": init_range, **self.config, **overrides}, seed, dtype, attn=eager,
                      experts=eager)
        _redraw(model, self.gain_centre, zero_matrices=init_range)
        return model


def _make(family: Family, config: dict, seed: int, dtype: torch.dtype | None = None, attn: str | None = None,
          experts: str | None = None) -> Any:
    """Seed, config, model (in `dtype` unless None), eval mode: the start of every build."""
    torch.manual_seed(seed)
    hf_config = family.config_cls(**config)
    if attn is not None:
        hf_config._attn_implementation = attn
    if experts is not None and hasattr(hf_config, "_experts_implementation"):
        hf_config._experts_implementation = experts
    model = family.model_cls(hf_config)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


def _redraw(model, gain_centre: float, bias_free: bool = False, zero_matrices: float | None = None) -> None:
    """Biases from N(0, 0.2) (or zero), 1-d weights (norm gains) from N(gain_centre, 0.2) and, with zero_matrices,
    every all-zero matrix (a router) from N(0, zero_matrices)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                if bias_free:
                    param.zero_()
                else:
                    param.normal_(0.0, 0.2)
            elif param.dim() == 1 and name.endswith("weight"):
                param.normal_(gain_centre, 0.2)
            elif zero_matrices is not None and param.dim() >= 2 and not bool(param.any()):
                param.normal_(0.0, zero_matrices)


def _family(name: str, config_cls: Any, model_cls: Any, adapter_family: str, capabilities: frozenset[str],
            gain_centre: float = 1.0, small: dict | None = None, lrp: dict | None = None,
            neurons: Callable[..., dict] | None = None, **overrides: Any) -> Family:
    """A decoder row whose registry build is _DECODER with `overrides`."""
    return Family(name, config_cls, model_cls, {**_DECODER, **overrides}, adapter_family, frozenset(capabilities),
                  gain_centre, small, lrp, neurons)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    _family("llama", hf.LlamaConfig, hf.LlamaForCausalLM, "llama", _REPLAYED,
            small={**_SMALL, "num_key_value_heads": 2},
            lrp={**_D16, "num_key_value_heads": 2, "tie_word_embeddings": False},
            neurons=lambda vocab, d, layers, d_mlp, heads: dict(
                vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=heads, intermediate_size=d_mlp, tie_word_embeddings=True,
                max_position_embeddings=256)),
    # SmolLM2's shape: 3 query heads sharing one key/value head, tied embeddings
    _family("smollm2", hf.LlamaConfig, hf.LlamaForCausalLM, "llama", _REPLAYED, hidden_size=24, num_attention_heads=3,
            num_key_value_heads=1, tie_word_embeddings=True),
    _family("qwen2", hf.Qwen2Config, hf.Qwen2ForCausalLM, "llama", _REPLAYED,  # q/k/v biases
            small={**_SMALL, "num_key_value_heads": 2, "eos_token_id": 0, "bos_token_id": 0},
            lrp={**_D16, "num_key_value_heads": 2, "tie_word_embeddings": False, "eos_token_id": 0,
                 "bos_token_id": 0}),
    _family("qwen3", hf.Qwen3Config, hf.Qwen3ForCausalLM, "llama", _REPLAYED, head_dim=8),  # per-head q/k norms
    _family("mistral", hf.MistralConfig, hf.MistralForCausalLM, "llama", _REPLAYED, sliding_window=4),
    _family("gemma", hf.GemmaConfig, hf.GemmaForCausalLM, "gemma", _REPLAYED, gain_centre=0.0, head_dim=8),
    _family("gemma2", hf.Gemma2Config, hf.Gemma2ForCausalLM, "gemma2", _DENSE, gain_centre=0.0, head_dim=8,
            query_pre_attn_scalar=8, sliding_window=4, final_logit_softcapping=3.0, attn_logit_softcapping=5.0),
    # (1 + w) RMSNorms, sandwich norms (the MLP's output is normalised before it joins the residual), q/k norms,
    # scaled embeddings, sliding window
    _family("gemma3", hf.Gemma3TextConfig, hf.Gemma3ForCausalLM, "gemma", _REPLAYED, gain_centre=0.0,
            small={**_SMALL, "num_key_value_heads": 1, "head_dim": 16, "query_pre_attn_scalar": 16,
                   "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"], **_IDS},
            lrp={**_D16, "num_key_value_heads": 2, **_GEMMA3, **_IDS},
            neurons=lambda vocab, d, layers, d_mlp, heads: dict(
                vocab_size=vocab, hidden_size=d, intermediate_size=d_mlp, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=1, head_dim=d // heads,
                query_pre_attn_scalar=d // heads, max_position_embeddings=256, sliding_window=8, **_IDS,
                layer_types=["full_attention"] * layers),
            **_GEMMA3),
    _family("olmo", hf.OlmoConfig, hf.OlmoForCausalLM, "olmo", _DENSE,  # weightless, mean-centred LayerNorm
            small={**_SMALL, **_IDS}, lrp={**_D16, "tie_word_embeddings": False, **_IDS}),
    _family("phi3", hf.Phi3Config, hf.Phi3ForCausalLM, "phi3", _DENSE),  # fused qkv_proj and gate_up_proj
    _family("mixtral", hf.MixtralConfig, hf.MixtralForCausalLM, "mixtral", _SPARSE, num_local_experts=4, **_MOE),
    _family("qwen2_moe", hf.Qwen2MoeConfig, hf.Qwen2MoeForCausalLM, "qwen2_moe", _SPARSE, num_experts=4,
            moe_intermediate_size=16, shared_expert_intermediate_size=24, norm_topk_prob=False, **_MOE),
    # one dense layer beside a sparse one (mlp_only_layers), renormalised top-k weights
    _family("qwen3_moe", hf.Qwen3MoeConfig, hf.Qwen3MoeForCausalLM, "qwen3_moe", _SPARSE, num_experts=4,
            moe_intermediate_size=16, head_dim=8, norm_topk_prob=True, mlp_only_layers=[0], **_MOE),
    _family("olmoe", hf.OlmoeConfig, hf.OlmoeForCausalLM, "olmoe", _SPARSE, num_experts=4, **_MOE),
    Family("gpt2", hf.GPT2Config, hf.GPT2LMHeadModel, _GPT2, "gpt2",
           _TRANSFORMER | {"mlp_neurons", "position_embedding"},
           small=dict(vocab_size=GPT2_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128), lrp=_GPT2,
           neurons=lambda vocab, d, layers, d_mlp, heads: dict(
               vocab_size=vocab, n_embd=d, n_layer=layers, n_head=heads, n_inner=d_mlp, n_positions=256)),
    Family("pythia", hf.GPTNeoXConfig, hf.GPTNeoXForCausalLM, _NEOX, "gpt_neox", _TRANSFORMER | {"mlp_neurons"},
           small=_SMALL, lrp=_NEOX,
           neurons=lambda vocab, d, layers, d_mlp, heads: dict(
               vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
               intermediate_size=d_mlp, max_position_embeddings=256)),
    Family("mamba", hf.MambaConfig, hf.MambaForCausalLM,
           dict(vocab_size=VOCAB, hidden_size=16, state_size=4, num_hidden_layers=2), "mamba",
           frozenset({"state_space"}),
           small=dict(vocab_size=128, hidden_size=16, state_size=4, num_hidden_layers=2)),
]}
ALIASES = {"gpt_neox": "pythia"}  # the adapter family's name, as the relevance and neuron tests ask for Pythia

# The README's list of supported families, each with the registry entries that stand for it.
README_FAMILIES: dict[str, tuple[str, ...]] = {
    "Llama/SmolLM2": ("llama", "smollm2"), "Qwen2": ("qwen2",), "Qwen3": ("qwen3",), "Mistral": ("mistral",),
    "Gemma/Gemma 2/Gemma 3": ("gemma", "gemma2", "gemma3"), "OLMo": ("olmo",), "Phi-3": ("phi3",), "GPT-2": ("gpt2",),
    "GPT-NeoX/Pythia": ("pythia",), "Mamba": ("mamba",), "Mixtral": ("mixtral",), "Qwen2-MoE": ("qwen2_moe",),
    "Qwen3-MoE": ("qwen3_moe",), "OLMoE": ("olmoe",),
}


def _row(family: str, build: str) -> Family:
    """The row of `family` (or its alias) that has a `build` column, else ValueError."""
    row = FAMILIES.get(ALIASES.get(family, family))
    if row is None or getattr(row, build) is None:
        raise ValueError(f"unknown family {family!r} for the {build} build")
    return row


# --- small: float32, as initialised ------------------------------------------------------------------------------

def small_model(family: str, vocab: int | None = None, seed: int = 0, **overrides: Any) -> Any:
    """The `small` build of `family` with `vocab` tokens (default: the row's) and config `overrides`."""
    row = _row(family, "small")
    config = dict(row.small or {})
    if vocab is not None:
        config["vocab_size"] = vocab
    return _make(row, {**config, **overrides}, seed)


def tiny_llama(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("llama", vocab, seed, **overrides)


def tiny_gpt2(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("gpt2", vocab, seed, **overrides)


def tiny_neox(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("pythia", vocab, seed, **overrides)


def tiny_mamba(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("mamba", vocab, seed, **overrides)


def tiny_gemma3(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("gemma3", vocab, seed, **overrides)


def tiny_qwen2(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("qwen2", vocab, seed, **overrides)


def tiny_olmo(vocab: int | None = None, seed: int = 0, **overrides):
    return small_model("olmo", vocab, seed, **overrides)


# the small builds by adapter family (Gemma 3 stands for the gemma adapter)
FACTORIES = {"llama": tiny_llama, "gpt2": tiny_gpt2, "gpt_neox": tiny_neox, "mamba": tiny_mamba,
             "gemma": tiny_gemma3, "qwen2": tiny_qwen2, "olmo": tiny_olmo}
FAMILY_OF = {"qwen2": "llama"}  # factories whose adapter family differs from their key


# --- lrp: the relevance checks' float64 builds --------------------------------------------------------------------

def relevance_model(family: str, attn: str = "eager", seed: int = 0, bias_free: bool = False,
                    init_range: float = 0.3):
    """A 2-layer, d_model 16 causal LM of `family` ('llama', 'gpt2', 'gpt_neox', 'qwen2', 'gemma3', 'olmo'),
    float64, eval mode, with the attention implementation `attn`; biases re-drawn (zeroed if `bias_free`) and norm
    gains drawn around their neutral value."""
    row = _row(family, "lrp")
    model = _make(row, {**(row.lrp or {}), "initializer_range": init_range}, seed, torch.float64, attn=attn)
    _redraw(model, row.gain_centre, bias_free=bias_free)
    return model


def tiny_ids(length: int = 10, seed: int = 1, vocab: int = VOCAB) -> torch.Tensor:
    """Token ids in [0, vocab) (the relevance checks)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, length), generator=generator)


def family_ids(length: int = 9, seed: int = 1) -> torch.Tensor:
    """Token ids avoiding the special ids 0-2 (the registry checks)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, length), generator=generator)


# --- neurons: planted entropy neurons -----------------------------------------------------------------------------
# Planting: choose k orthonormal directions D (orthogonal to the all-ones vector, so LayerNorm's centring keeps
# them), remove them from what the folded unembedding reads (W_U^T (gamma * D) = 0), and give one final-layer
# neuron a large write vector inside span(D). Its direct effect on the logits is then exactly zero, while its
# contribution to the residual norm (and so to the final norm's scale) is large.

def neuron_model(family: str = "gpt2", vocab_size: int = 200, d_model: int = 32, n_layers: int = 2,
                 d_mlp: int = 64, n_heads: int = 4, seed: int = 0, dtype: torch.dtype = torch.float64,
                 embedding_std: float = 0.5):
    """A randomly initialised causal LM of the given family ('gpt2', 'llama', 'gpt_neox', 'gemma3') with tied or
    untied unembedding as that family does by default, and an embedding large enough for confident predictions."""
    row = _row(family, "neurons")
    model = _make(row, row.neurons(vocab_size, d_model, n_layers, d_mlp, n_heads), seed, dtype)
    adapter = get_adapter(model)
    with torch.no_grad():
        adapter.W_E().normal_(0.0, embedding_std)
        unembed = weight_of(adapter.unembedding())
        if unembed.data_ptr() != adapter.W_E().data_ptr():
            unembed.normal_(0.0, embedding_std)
    try:
        model.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001 - older configs without the switch
        pass
    return model


def set_output_norm_gains(model, log_std: float = 1.5, median: float = 300.0, seed: int = 2) -> None:
    """Give every MLP output norm large, uneven gains (log-normal around `median`), as Gemma 3's are (hundreds
    to thousands): what a neuron writes into the residual then points far from its row of W_out."""
    adapter = get_adapter(model)
    generator = torch.Generator().manual_seed(seed)
    for layer in range(adapter.n_layers):
        module = adapter.mlp_output_norm(layer)
        if module is None:
            continue
        gains = median * torch.exp(log_std * torch.randn(adapter.d_model, generator=generator, dtype=torch.float64))
        offset = adapter.norm_spec(module).weight_offset
        with torch.no_grad():
            weight_of(module).copy_((gains - offset).to(weight_of(module).dtype))


def plant_entropy_neuron(model, layer: int, index: int, k: int, norm: float = 30.0, seed: int = 1,
                         hide_in_gains: float | None = None) -> torch.Tensor:
    """Make neuron (layer, index) an entropy neuron: what it writes into the residual lies in k directions the
    folded W_U cannot read, which become W_U's bottom-k singular directions. Without an MLP output norm that write
    is its w_out (norm `norm`); through an RMS output norm with gain gamma it is gamma * w_out / r, so w_out is the
    write divided by gamma (rescaled to norm `norm`). hide_in_gains=g first sets that norm's gains to g times the
    squared relative size of each write component (floored at 0.1): the largest gains where the neuron writes
    most, so its row of W_out points away from its write. Returns those directions [d, k]."""
    adapter = get_adapter(model)
    d_model = adapter.d_model
    generator = torch.Generator().manual_seed(seed)
    W_U = weight_of(adapter.unembedding())  # [V, d]
    dtype = W_U.dtype
    raw = torch.randn(d_model, k, generator=generator, dtype=torch.float64)
    raw = raw - raw.mean(0, keepdim=True)
    directions, _ = torch.linalg.qr(raw)
    gamma = final_norm(adapter).gamma.double().cpu()
    readers, _ = torch.linalg.qr(gamma[:, None] * directions)
    with torch.no_grad():
        W = W_U.double().cpu()
        W_U.copy_((W - (W @ readers) @ readers.T).to(dtype))
        mix = torch.randn(k, generator=generator, dtype=torch.float64)
        write = directions @ (mix / mix.norm()) * norm
        module = adapter.mlp_output_norm(layer)
        if module is not None and hide_in_gains is not None:
            relative = (write.abs() / write.pow(2).mean().sqrt()).clamp_min(0.1)
            gains = hide_in_gains * relative.pow(2)
            weight_of(module).copy_((gains - adapter.norm_spec(module).weight_offset).to(weight_of(module).dtype))
        post = output_norm(adapter, layer)
        if post is not None:
            if post.centres:
                raise ValueError("planting through a centring output norm is not supported")
            write = write / post.gamma.double().cpu()
            write = write / write.norm() * norm
        adapter.W_out(layer)[index].copy_(write.to(dtype))
    return directions


def loaded(model, tokenizer, name: str = "tiny"):
    """Wrap a model and tokenizer as a LoadedModel (CPU), as load_model would."""
    from interpscope.models.loading import LoadedModel

    return LoadedModel(name=name, model=model, tokenizer=tokenizer, adapter=get_adapter(model),
                       device=torch.device("cpu"), dtype=next(model.parameters()).dtype, source="memory",
                       load_seconds=0.0)


# --- encoder-decoders ---------------------------------------------------------------------------------------------
# Their relevance runs through interpscope.relevance.seq2seq (source + decoder input), so the decoder-only checks
# above do not apply; tests/relevance/test_t5.py runs the same laws over these.

_T5 = dict(d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=4,
           relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
           decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
ENCODER_DECODERS: dict[str, Family] = {"t5": Family(
    "t5", hf.T5Config, hf.T5ForConditionalGeneration, {"vocab_size": VOCAB, **_T5, "feed_forward_proj": "gated-gelu"},
    "t5", frozenset({"encoder_decoder", "attention", "mlp_neurons", "gated_mlp"}),
    small={"vocab_size": 128, **_T5})}

T5_WORDS = ("the a cat dog sat on mat is in of and to house big small red blue green translate English German "
            "French summarize question answer : .").split()


def t5_tokenizer():
    """A T5Tokenizer (Unigram) over a few words and single characters: <pad>=0 (the decoder start), </s>=1, <unk>=2."""
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    vocab += [("▁" + word, -3.0) for word in T5_WORDS]
    vocab += [(c, -5.0) for c in string.ascii_letters + string.digits + string.punctuation]
    return T5Tokenizer(vocab=vocab, extra_ids=0)


def tiny_t5(gated: bool = False, seed: int = 0, vocab: int | None = None, dtype: torch.dtype = torch.float64):
    """The `small` T5ForConditionalGeneration: 2+2 blocks, d_model 16, 4 heads of 4, relative position buckets,
    eager attention; `gated` gives Flan-T5's gated-GELU MLP and no output rescale (T5 v1.1), else ReLU with the
    d_model ** -0.5 rescale. Norm gains drawn around 1 so every norm matters (T5 has no biases)."""
    row = ENCODER_DECODERS["t5"]
    config = {**(row.small or {}), "feed_forward_proj": "gated-gelu" if gated else "relu",
              "tie_word_embeddings": not gated}
    if vocab is not None:
        config["vocab_size"] = vocab
    model = _make(row, config, seed, dtype, attn="eager")
    _redraw(model, 1.0)
    return model


def save_tiny_t5(folder: Path, gated: bool = False, seed: int = 0) -> Path:
    """A float32 tiny T5 and its tokenizer saved to `folder` (what `interpscope explain --model DIR` loads)."""
    tokenizer = t5_tokenizer()
    model = tiny_t5(gated=gated, seed=seed, vocab=len(tokenizer), dtype=torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --- image classifiers --------------------------------------------------------------------------------------------

VIT_LABELS = ["zero", "one", "two", "three"]
IMAGE_CLASSIFIERS: dict[str, tuple[Any, Any]] = {"vit": (hf.ViTConfig, hf.ViTForImageClassification),
                                                 "deit": (hf.DeiTConfig, hf.DeiTForImageClassification)}


def tiny_vit(seed: int = 0, kind: str = "vit", channels: int = 1, **overrides):
    """A `kind` ('vit' or 'deit') classifier of 12x12 pixels, patch 4 (a 3x3 grid), 2 layers, d 16, 2 heads, 4
    classes; weights large enough that the pixels matter, non-zero biases and embeddings so that the conservation
    readout's bias share is exercised."""
    config_cls, model_cls = IMAGE_CLASSIFIERS[kind]
    torch.manual_seed(seed)
    settings = {"image_size": 12, "patch_size": 4, "num_channels": channels, "hidden_size": 16,
                "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
                "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "num_labels": len(VIT_LABELS),
                "initializer_range": 0.3, "id2label": dict(enumerate(VIT_LABELS)),
                "label2id": {n: i for i, n in enumerate(VIT_LABELS)}, **overrides}
    model = model_cls(config_cls(**settings)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "token" in name or "position" in name:
                param.normal_(0, 0.1)
    return model


def tiny_vit_folder(folder: Path, seed: int = 0, kind: str = "vit", channels: int = 1) -> Path:
    """Save a tiny random ViT (config.json, model.safetensors, preprocessor_config.json) into `folder`."""
    model = tiny_vit(seed, kind, channels)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"do_resize": True, "size": {"height": 12, "width": 12}, "do_rescale": True, "rescale_factor": 1 / 255,
         "do_normalize": True, "image_mean": [0.5] * channels, "image_std": [0.5] * channels}))
    return folder


def sample_image(seed: int = 0, size: int = 12) -> np.ndarray:
    """A random-looking but fixed uint8 RGB image [size, size, 3] with a bright block (something to find)."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    image[2:7, 5:10] = 230
    return image


def png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()
