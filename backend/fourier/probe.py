"""Entry points shared by the command line and the page: pick the numbers and prompts a model supports."""
from __future__ import annotations

import numpy as np

from backend.config import InterpscopeError
from backend.fourier.data import sample_pairs
from backend.fourier.numbers import NumberTokens, number_tokens, single_token_numbers, splits_digits

MAX_NUMBERS = 520
DIGIT_DEFAULT_NUMBERS = 100


def default_numbers(lm) -> int:
    """How many numbers to analyse: every single-token number (at most 520), or 100 for digit tokenizers."""
    if splits_digits(lm.tokenizer):
        return DIGIT_DEFAULT_NUMBERS
    return min(MAX_NUMBERS, single_token_numbers(lm.tokenizer, limit=MAX_NUMBERS))


def check_numbers(n_numbers: int) -> int:
    if not 10 <= n_numbers <= 2000:
        raise InterpscopeError("Choose between 10 and 2000 numbers.")
    return int(n_numbers)


def single_token_setup(lm, n_numbers: int | None) -> NumberTokens:
    """Number tokens for the module lens and the filters, which need one token per number."""
    if splits_digits(lm.tokenizer):
        raise InterpscopeError(
            f"{lm.name} splits numbers into digits, so the number unembedding W_U_num does not exist: the module "
            "logit lens and the frequency filters need a model whose numbers are single tokens (the bundled "
            "'adder', or GPT-2). The hidden-state spectrum and the accuracy probe work on this model.")
    return number_tokens(lm.tokenizer, check_numbers(n_numbers or default_numbers(lm)))


def probe_pairs(n_numbers: int, n_prompts: int, split: str = "test", seed: int = 0) -> np.ndarray:
    """Operand pairs of the paper's recipe (a, b < N/2) from one split, at most n_prompts of them."""
    if not 1 <= n_prompts <= 100_000:
        raise InterpscopeError("Ask for between 1 and 100000 prompts.")
    return sample_pairs(n_numbers, n_prompts, split=split, seed=seed)
