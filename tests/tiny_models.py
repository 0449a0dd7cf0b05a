"""Tiny random models of every supported family, for tests that need real module structure but no weights."""
from __future__ import annotations

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MambaConfig,
    MambaForCausalLM,
)

GPT2_VOCAB = 50257


def tiny_llama(vocab: int = 128, seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, **overrides)
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(vocab: int = GPT2_VOCAB, seed: int = 0, **overrides) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=128, **overrides)
    return GPT2LMHeadModel(config).eval()


def tiny_neox(vocab: int = 128, seed: int = 0, **overrides) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    config = GPTNeoXConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=128, **overrides)
    return GPTNeoXForCausalLM(config).eval()


def tiny_mamba(vocab: int = 128, seed: int = 0, **overrides) -> MambaForCausalLM:
    torch.manual_seed(seed)
    config = MambaConfig(vocab_size=vocab, hidden_size=16, state_size=4, num_hidden_layers=2, **overrides)
    return MambaForCausalLM(config).eval()


def tiny_gemma3(vocab: int = 128, seed: int = 0, **overrides):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
                              query_pre_attn_scalar=16, sliding_window=8,
                              layer_types=["sliding_attention", "full_attention"], pad_token_id=0, eos_token_id=1,
                              bos_token_id=2, **overrides)
    return Gemma3ForCausalLM(config).eval()


def tiny_qwen2(vocab: int = 128, seed: int = 0, **overrides):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, eos_token_id=0,
                         bos_token_id=0, **overrides)
    return Qwen2ForCausalLM(config).eval()


def tiny_olmo(vocab: int = 128, seed: int = 0, **overrides):
    from transformers import OlmoConfig, OlmoForCausalLM

    torch.manual_seed(seed)
    config = OlmoConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=128, pad_token_id=0, eos_token_id=1,
                        bos_token_id=2, **overrides)
    return OlmoForCausalLM(config).eval()


FACTORIES = {"llama": tiny_llama, "gpt2": tiny_gpt2, "gpt_neox": tiny_neox, "mamba": tiny_mamba,
             "gemma": tiny_gemma3, "qwen2": tiny_qwen2, "olmo": tiny_olmo}
FAMILY_OF = {"qwen2": "llama"}  # factories whose adapter family differs from their key
