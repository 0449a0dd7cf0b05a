"""Tiny random T5 encoder-decoders (relative position bias; ReLU or Flan-T5's gated-GELU MLP) with a small real T5
tokenizer (Unigram, '</s>' appended to the source), built offline and saved as a Hugging Face folder."""
from __future__ import annotations

import string
from pathlib import Path

import torch

WORDS = ("the a cat dog sat on mat is in of and to house big small red blue green translate English German French "
         "summarize question answer : .").split()


def t5_tokenizer():
    """A T5Tokenizer (Unigram) over a few words and single characters: <pad>=0 (the decoder start), </s>=1, <unk>=2."""
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    vocab += [("▁" + word, -3.0) for word in WORDS]
    vocab += [(c, -5.0) for c in string.ascii_letters + string.digits + string.punctuation]
    return T5Tokenizer(vocab=vocab, extra_ids=0)


def tiny_t5(gated: bool = False, seed: int = 0, vocab: int = 128, dtype: torch.dtype = torch.float64):
    """A 2+2-block T5ForConditionalGeneration, d_model 16, 4 heads of 4, relative position buckets; `gated` gives
    Flan-T5's gated-GELU MLP and no output rescale (T5 v1.1), else ReLU with the d_model ** -0.5 rescale. Norm gains
    drawn around 1 so every norm matters."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    config = T5Config(vocab_size=vocab, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                      feed_forward_proj="gated-gelu" if gated else "relu", decoder_start_token_id=0,
                      pad_token_id=0, eos_token_id=1, tie_word_embeddings=not gated)
    config._attn_implementation = "eager"
    model = T5ForConditionalGeneration(config).to(dtype).eval()
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.2)
    return model


def save_tiny_t5(folder: Path, gated: bool = False, seed: int = 0) -> Path:
    """A float32 tiny T5 and its tokenizer saved to `folder` (what `interpscope explain --model DIR` loads)."""
    tokenizer = t5_tokenizer()
    model = tiny_t5(gated=gated, seed=seed, vocab=len(tokenizer), dtype=torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
