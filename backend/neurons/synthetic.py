"""Tiny models with a planted entropy neuron: the ground truth the finder and the ablation are checked against.

Planting: choose k orthonormal directions D (orthogonal to the all-ones vector, so LayerNorm's centring keeps
them), remove them from what the folded unembedding reads (W_U^T (gamma * D) = 0), and give one final-layer
neuron a large write vector inside span(D). Its direct effect on the logits is then exactly zero, while its
contribution to the residual norm (and so to the final norm's scale) is large.
"""
from __future__ import annotations


import torch

from backend.adapters import get_adapter
from backend.neurons.folding import final_norm


def tiny_model(family: str = "gpt2", vocab_size: int = 200, d_model: int = 32, n_layers: int = 2,
               d_mlp: int = 64, n_heads: int = 4, seed: int = 0, dtype: torch.dtype = torch.float64,
               embedding_std: float = 0.5):
    """A randomly initialised causal LM of the given family ('gpt2', 'llama', 'gpt_neox') with tied or untied
    unembedding as that family does by default, and an embedding large enough for confident predictions."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, \
        LlamaForCausalLM

    torch.manual_seed(seed)
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
    else:
        raise ValueError(f"unknown family {family!r}")
    model = model.to(dtype).eval()
    adapter = get_adapter(model)
    with torch.no_grad():
        adapter.W_E().normal_(0.0, embedding_std)
        unembed = adapter.unembedding().weight
        if unembed.data_ptr() != adapter.W_E().data_ptr():
            unembed.normal_(0.0, embedding_std)
    try:
        model.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001 - older configs without the switch
        pass
    return model


def plant_entropy_neuron(model, layer: int, index: int, k: int, norm: float = 30.0, seed: int = 1) -> torch.Tensor:
    """Make neuron (layer, index) an entropy neuron: its w_out (norm `norm`) lies in k directions the folded
    W_U cannot read, which become W_U's bottom-k singular directions. Returns those directions [d, k]."""
    adapter = get_adapter(model)
    d_model = adapter.d_model
    generator = torch.Generator().manual_seed(seed)
    W_U = adapter.unembedding().weight  # [V, d]
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
        adapter.W_out(layer)[index].copy_(write.to(dtype))
    return directions


def loaded(model, tokenizer, name: str = "tiny"):
    """Wrap a model and tokenizer as a LoadedModel (CPU), as load_model would."""
    from backend.models.loading import LoadedModel

    return LoadedModel(name=name, model=model, tokenizer=tokenizer, adapter=get_adapter(model),
                       device=torch.device("cpu"), dtype=next(model.parameters()).dtype, source="memory",
                       load_seconds=0.0)
