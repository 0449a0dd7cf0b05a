"""Tiny random Llama / GPT-2 / GPT-NeoX causal LMs in float64 for the relevance checks (no downloads)."""
from __future__ import annotations

import torch


def tiny_model(family: str, attn: str = "eager", seed: int = 0, bias_free: bool = False,
               init_range: float = 0.3):
    """A 2-layer, d_model 16 causal LM of `family` ('llama', 'gpt2', 'gpt_neox', 'qwen2', 'gemma3', 'olmo'),
    float64, eval mode."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        OlmoConfig,
        OlmoForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    if family == "llama":
        config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             initializer_range=init_range, tie_word_embeddings=False)
        model_cls = LlamaForCausalLM
    elif family == "gpt2":
        config = GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=4, n_positions=64,
                            initializer_range=init_range, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model_cls = GPT2LMHeadModel
    elif family == "gpt_neox":
        config = GPTNeoXConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5,
                               initializer_range=init_range, use_parallel_residual=True)
        model_cls = GPTNeoXForCausalLM
    elif family == "qwen2":  # Llama's layout with q/k/v biases
        config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             initializer_range=init_range, tie_word_embeddings=False, eos_token_id=0,
                             bos_token_id=0)
        model_cls = Qwen2ForCausalLM
    elif family == "gemma3":  # (1 + w) RMSNorms, sandwich norms, q/k norms, scaled embeddings, sliding window
        config = Gemma3TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  max_position_embeddings=64, query_pre_attn_scalar=8, sliding_window=4,
                                  layer_types=["sliding_attention", "full_attention"], initializer_range=init_range,
                                  pad_token_id=0, eos_token_id=1, bos_token_id=2)
        model_cls = Gemma3ForCausalLM
    elif family == "olmo":  # weightless, mean-centred LayerNorm
        config = OlmoConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=64, initializer_range=init_range,
                            tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=2)
        model_cls = OlmoForCausalLM
    else:
        raise ValueError(family)
    config._attn_implementation = attn
    model = model_cls(config).to(torch.float64).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                if bias_free:
                    param.zero_()
                else:
                    param.normal_(0.0, 0.2)
            elif name.endswith("weight") and param.dim() == 1:  # Gemma's gain is 1 + w: keep it away from 0
                param.normal_(0.0 if family == "gemma3" else 1.0, 0.2)
    return model


def tiny_ids(length: int = 10, seed: int = 1, vocab: int = 64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, length), generator=generator)
