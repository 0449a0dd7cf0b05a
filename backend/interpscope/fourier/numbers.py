"""Which token ids spell the numbers 0..N-1, and the number rows of a model's embedding and unembedding.

Models like GPT-2 (0..~520) and the bundled adder (0..N-1) give each number its own token; SmolLM2 splits
numbers into digits, so there a number is represented by the hidden state at its last digit instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interpscope.config import InterpscopeError


@dataclass(frozen=True)
class NumberTokens:
    """Token ids of the numbers 0..N-1, written with `prefix` ('' or ' ')."""

    ids: np.ndarray
    prefix: str

    @property
    def n_numbers(self) -> int:
        return int(len(self.ids))


def _single_token(tokenizer, text: str) -> int | None:
    """The one token that spells text, or None (several tokens, or an unknown-token fallback)."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
        return None
    return int(ids[0]) if tokenizer.decode(ids).strip() == text.strip() else None


def single_token_numbers(tokenizer, limit: int = 1000) -> int:
    """How many numbers 0, 1, 2, ... are single tokens in a row (best of no prefix / a space prefix)."""
    best = 0
    for prefix in ("", " "):
        count = 0
        while count < limit and _single_token(tokenizer, f"{prefix}{count}") is not None:
            count += 1
        best = max(best, count)
    return best


def number_tokens(tokenizer, n_numbers: int) -> NumberTokens:
    """Ids of the numbers 0..N-1 when each is a single token; an explanation of the limit otherwise."""
    if n_numbers < 2:
        raise InterpscopeError("Use at least 2 numbers.")
    for prefix in ("", " "):
        ids = [_single_token(tokenizer, f"{prefix}{n}") for n in range(n_numbers)]
        if all(i is not None for i in ids) and len(set(ids)) == n_numbers:
            return NumberTokens(ids=np.array(ids, dtype=np.int64), prefix=prefix)
    available = single_token_numbers(tokenizer, limit=n_numbers)
    if available < 10:
        raise InterpscopeError(
            "This tokenizer splits numbers into digits, so numbers have no token of their own: use the "
            "hidden-state spectrum (source 'hidden') instead of the embedding/unembedding analysis.")
    raise InterpscopeError(f"Only the numbers 0..{available - 1} are single tokens in this tokenizer; "
                           f"choose at most {available} numbers.")


def splits_digits(tokenizer) -> bool:
    """True when a two-digit number is more than one token (e.g. SmolLM2, Llama)."""
    return _single_token(tokenizer, "47") is None and _single_token(tokenizer, " 47") is None


def number_embeddings(adapter, numbers: NumberTokens) -> np.ndarray:
    """W_E restricted to the number tokens, [N, d_model] (float64)."""
    index = torch.as_tensor(numbers.ids, device=adapter.W_E().device)
    return adapter.W_E().detach()[index].double().cpu().numpy()


def number_unembedding(adapter, numbers: NumberTokens) -> torch.Tensor:
    """W_U restricted to the number tokens, [d_model, N], on the model's device and dtype."""
    index = torch.as_tensor(numbers.ids, device=adapter.W_U().device)
    return adapter.W_U().detach()[:, index]
