"""Tiny models with a planted entropy neuron: the ground truth the finder and the ablation are checked against.

Planting: choose k orthonormal directions D (orthogonal to the all-ones vector, so LayerNorm's centring keeps
them), remove them from what the folded unembedding reads (W_U^T (gamma * D) = 0), and give one final-layer
neuron a large write vector inside span(D). Its direct effect on the logits is then exactly zero, while its
contribution to the residual norm (and so to the final norm's scale) is large.
"""
from __future__ import annotations

import torch

from interpscope.adapters import get_adapter
from interpscope.adapters.base import weight_of
from interpscope.entropy_neurons.folding import final_norm, output_norm


def tiny_model(family: str = "gpt2", vocab_size: int = 200, d_model: int = 32, n_layers: int = 2,
               d_mlp: int = 64, n_heads: int = 4, seed: int = 0, dtype: torch.dtype = torch.float64,
               embedding_std: float = 0.5):
    """A randomly initialised causal LM of the given family ('gpt2', 'llama', 'gpt_neox', 'gemma3') with tied or untied
    unembedding as that family does by default, and an embedding large enough for confident predictions."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        PretrainedConfig,
        PreTrainedModel,
    )

    torch.manual_seed(seed)
    config: PretrainedConfig
    model: PreTrainedModel
    if family == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
                            n_inner=d_mlp, n_positions=256)
        model = GPT2LMHeadModel(config)
    elif family == "llama":
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=n_layers,
                             num_attention_heads=n_heads, num_key_value_heads=n_heads, intermediate_size=d_mlp,
                             tie_word_embeddings=True, max_position_embeddings=256)
        model = LlamaForCausalLM(config)
    elif family == "gpt_neox":
        config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=n_layers,
                               num_attention_heads=n_heads, intermediate_size=d_mlp, max_position_embeddings=256)
        model = GPTNeoXForCausalLM(config)
    elif family == "gemma3":  # sandwich norms: the MLP's output is normalised before it joins the residual
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        config = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=d_model, intermediate_size=d_mlp,
                                  num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=1,
                                  head_dim=d_model // n_heads, query_pre_attn_scalar=d_model // n_heads,
                                  max_position_embeddings=256, sliding_window=8, pad_token_id=0, eos_token_id=1,
                                  bos_token_id=2, layer_types=["full_attention"] * n_layers)
        model = Gemma3ForCausalLM(config)
    else:
        raise ValueError(f"unknown family {family!r}")
    model = model.to(dtype).eval()  # type: ignore[arg-type]  # transformers types its wrapped .to as unbound
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
