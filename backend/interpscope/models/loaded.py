"""The loaded model: one type for what load_model returns, and what every analysis takes as `lm`.

Its own module (nothing here imports the loader or the cache) so any module can name the type, at run time or
under TYPE_CHECKING, without an import circle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interpscope.adapters import ModelAdapter
from interpscope.inputs import DEFAULT_TOKEN_CAP, check_text, check_token_count

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def decode_text(tokenizer: PreTrainedTokenizerBase, ids, skip_special_tokens: bool = False) -> str:
    """One sequence of token ids as text. transformers types decode as `str | list[str]` (a batch of sequences gives
    a list); one sequence gives one string, checked here."""
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    if not isinstance(text, str):
        raise TypeError("decode_text takes one sequence of token ids, not a batch")
    return text


@dataclass
class LoadedModel:
    """A loaded causal LM (or encoder-decoder: is_encoder_decoder) with its tokenizer, adapter, and the facts a model
    card shows."""

    name: str
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    adapter: ModelAdapter
    device: torch.device
    dtype: torch.dtype
    source: str
    load_seconds: float

    @property
    def family(self) -> str:
        return self.adapter.family

    @property
    def is_encoder_decoder(self) -> bool:
        """An encoder-decoder (T5): text goes to the encoder, the explained token is the decoder's
        (interpscope.relevance.seq2seq); decoder-only views do not apply."""
        return bool(getattr(self.model.config, "is_encoder_decoder", False))

    @property
    def context_length(self) -> int | None:
        for attr in ("max_position_embeddings", "n_positions", "n_ctx"):
            value = getattr(self.model.config, attr, None)
            if value:
                return int(value)
        return None

    @property
    def token_cap(self) -> int:
        context = self.context_length
        return min(DEFAULT_TOKEN_CAP, context) if context else DEFAULT_TOKEN_CAP

    @property
    def prefix_token_id(self) -> int | None:
        """The token put before a person's text when one is prepended (interpscope.inputs.input_ids_for): the
        bundled model's measured prefix (BundledModel.prefix_token), else the tokenizer's BOS; None without one."""
        from interpscope.models.registry import BUNDLED

        entry = BUNDLED.get(self.name)
        if entry is not None and entry.prefix_token is not None:
            token_id = self.tokenizer.convert_tokens_to_ids(entry.prefix_token)
            if isinstance(token_id, int) and token_id >= 0:
                return token_id
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return int(bos) if bos is not None else None

    def encode(self, text: str, max_tokens: int | None = None) -> torch.Tensor:
        """Token ids [1, T] on the model's device, after checking the text and its length."""
        check_text(text)
        ids = self.tokenizer(text, return_tensors="pt").input_ids
        check_token_count(ids.shape[1], max_tokens or self.token_cap, self.cap_source(max_tokens))
        return ids.to(self.device)

    def cap_source(self, max_tokens: int | None) -> str | None:
        """Where a token cap comes from, for the refusal: a view's own cap below the model's says so (the
        attribution graph's 128 tokens is not INTERPSCOPE_MAX_TOKENS); None: the model's context or the setting."""
        return "this view's own limit" if max_tokens and max_tokens < self.token_cap else None

    def token_strings(self, ids) -> list[str]:
        """Readable text of each token id (byte-level BPE markers decoded; a token holding part of a multi-byte
        character shown by its bytes, <0xF0>: interpscope.token_text)."""
        from interpscope.token_text import token_texts

        flat = ids.reshape(-1).tolist() if hasattr(ids, "reshape") else list(ids)
        return token_texts(self.tokenizer, flat)

    def n_parameters(self) -> int:
        seen: set[int] = set()
        total = 0
        for param in self.model.parameters():
            if param.data_ptr() not in seen:
                seen.add(param.data_ptr())
                total += param.numel()
        return total

    def card(self) -> dict:
        info = {"name": self.name, "source": self.source, "parameters": self.n_parameters()}
        info.update(self.adapter.describe())
        info.update({"context": self.context_length, "device": str(self.device),
                     "dtype": str(self.dtype).replace("torch.", ""), "load_seconds": round(self.load_seconds, 2)})
        return info
