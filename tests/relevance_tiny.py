"""Tiny random Llama / GPT-2 / GPT-NeoX causal LMs in float64 for the relevance checks (no downloads)."""
from __future__ import annotations

import torch


def tiny_model(family: str, attn: str = "eager", seed: int = 0, bias_free: bool = False,
               init_range: float = 0.3):
    """A 2-layer, d_model 16 causal LM of `family` ('llama', 'gpt2', 'gpt_neox'), float64, eval mode."""
    from transformers import (GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig,
                              LlamaForCausalLM)

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
            elif name.endswith("weight") and param.dim() == 1:
                param.normal_(1.0, 0.2)
    return model


def tiny_ids(length: int = 10, seed: int = 1, vocab: int = 64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, length), generator=generator)
