"""Entry points shared by the command line and the page: pick the numbers and prompts a model supports."""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.fourier.data import PromptPairs, sample_pairs
from interpscope.fourier.numbers import NumberTokens, number_tokens, single_token_numbers, splits_digits

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MAX_NUMBERS = 520
DIGIT_DEFAULT_NUMBERS = 100
DIGIT_PROBE_PROMPTS = 40  # the Fourier page's default probe size for models that split digits


def default_numbers(lm: LoadedModel) -> int:
    """How many numbers to analyse: every single-token number (at most 520), or 100 for digit tokenizers."""
    if splits_digits(lm.tokenizer):
        return DIGIT_DEFAULT_NUMBERS
    return min(MAX_NUMBERS, single_token_numbers(lm.tokenizer, limit=MAX_NUMBERS))


def check_numbers(n_numbers: int) -> int:
    if not 10 <= n_numbers <= 2000:
        raise InterpscopeError("Choose between 10 and 2000 numbers.")
    return int(n_numbers)


def single_token_setup(lm: LoadedModel, n_numbers: int | None) -> NumberTokens:
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


@lru_cache(maxsize=64)
def split_size(n_numbers: int, split: str = "test") -> int:
    """How many operand pairs `split` holds for N = n_numbers (what the filter table can run on at most)."""
    return int(len(sample_pairs(n_numbers, 100_000, split=split, seed=0)))


def default_prompts(n_numbers: int, split: str = "test", wanted: int = 500) -> int:
    """The filter table's default prompt count: `wanted`, or the whole split where it holds fewer (a default that
    always warns "the split has fewer pairs" is no default; issue 45.16)."""
    return min(int(wanted), split_size(n_numbers, split))


def prompt_pairs(n_numbers: int, n_prompts: int, split: str = "test", seed: int = 0) -> PromptPairs:
    """probe_pairs with the request kept: the filter table and the probe report when a split has fewer pairs
    than asked for instead of silently running fewer (serves the Fourier page's Filters and probe tabs)."""
    return PromptPairs(pairs=probe_pairs(n_numbers, n_prompts, split=split, seed=seed), requested=int(n_prompts),
                       split=split, n_numbers=int(n_numbers))


# the full filter table: no filter, then high- and low-pass on attention + MLP, the MLPs, attention
TABLE_CONFIGS = [("none", "none")] + [(kind, modules) for kind in ("high", "low")
                                      for modules in ("both", "mlp", "attn")]


def run_filters(lm: LoadedModel, configs: list[tuple[str, str]] | None = None, *, tau: int | None = None,
                prompts: int = 500,
                numbers: int | None = None, split: str = "test", positions: str = "last", template: str = "{a}+{b}=",
                control_seeds: int | None = None, batch_size: int = 512, scale=None, progress=None):
    """The filter table for `configs` (default: the full table; one filter is [("none", "none"), (kind, modules)])
    over `prompts` a+b prompts of `split`: serves `interpscope fourier filter|table` and interpscope.fourier.filter /
    .table. Returns a FilterTable (interpscope.fourier.filters)."""
    from interpscope.fourier.controls import DEFAULT_CONTROL_SEEDS
    from interpscope.fourier.data import check_template
    from interpscope.fourier.filters import filter_table

    number_set = single_token_setup(lm, numbers)
    pairs = prompt_pairs(number_set.n_numbers, prompts, split=split)
    return filter_table(lm, number_set, pairs, template=check_template(template), tau=tau,
                        configs=list(configs or TABLE_CONFIGS), progress=progress, positions=positions,
                        batch_size=batch_size, scale=scale,
                        control_seeds=DEFAULT_CONTROL_SEEDS if control_seeds is None else control_seeds)
