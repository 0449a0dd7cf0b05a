"""The addition probe: run prompts 'a+b=' on a model and score its answers (exact, within +-2, within +-10).

Models whose numbers are single tokens (the bundled adder, GPT-2) answer with one token: the prediction is the
argmax of the next-token logits over the whole vocabulary. Models that split numbers into digits answer by
greedy generation of a few tokens, parsed as an integer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.fourier.data import render
from interpscope.fourier.numbers import NumberTokens
from interpscope.models.loaded import decode_text
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class AdditionResult(Result):
    """Per-prompt operands, answers and predictions (-1 = not a number), with summary accuracies."""

    model: str
    template: str
    pairs: np.ndarray
    answers: np.ndarray
    predictions: np.ndarray
    accuracy: float
    within_2: float
    within_10: float
    mode: str

    SCHEMA = "interpscope.fourier.addition"
    SCHEMA_VERSION = 1


def score(predictions: np.ndarray, answers: np.ndarray) -> tuple[float, float, float]:
    """Exact, within-2 and within-10 accuracy; a prediction of -1 (no number) is wrong at every tolerance."""
    valid = predictions >= 0
    error = np.abs(predictions - answers)
    count = max(1, len(answers))
    return (float(np.sum(valid & (error == 0)) / count), float(np.sum(valid & (error <= 2)) / count),
            float(np.sum(valid & (error <= 10)) / count))


def pad_right(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T], attention mask [B, T] and the index of each text's last token [B]."""
    encoded = [tokenizer(text).input_ids for text in texts]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(encoded):
        ids[row, :len(seq)] = torch.tensor(seq)
        mask[row, :len(seq)] = 1
    return ids, mask, mask.sum(dim=1) - 1


def token_to_number(numbers: NumberTokens) -> dict[int, int]:
    return {int(token): value for value, token in enumerate(numbers.ids)}


def single_token_predictions(lm: LoadedModel, numbers: NumberTokens, texts: list[str], batch: int = 512) -> np.ndarray:
    """The argmax next token after each prompt, as a number (-1 when the top token is not a number)."""
    lookup = token_to_number(numbers)
    predictions = []
    with model_lock(lm), torch.no_grad():
        for start in range(0, len(texts), batch):
            ids, mask, last = pad_right(lm.tokenizer, texts[start:start + batch])
            logits = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), use_cache=False).logits
            top = logits[torch.arange(len(ids)), last.to(lm.device)].argmax(dim=-1).tolist()
            predictions += [lookup.get(int(token), -1) for token in top]
    return np.array(predictions, dtype=np.int64)


_LEADING_INT = re.compile(r"^\s*(-?\d+)")


def parse_number(text: str) -> int:
    """The integer a generated answer starts with, or -1."""
    match = _LEADING_INT.match(text)
    return int(match.group(1)) if match else -1


def generated_predictions(lm: LoadedModel, texts: list[str], max_new_tokens: int = 4, batch: int = 64) -> np.ndarray:
    """Greedy-generate a few tokens after each prompt (left-padded batches) and parse the leading integer."""
    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    predictions = []
    with model_lock(lm), torch.no_grad():
        for start in range(0, len(texts), batch):
            encoded = [tokenizer(text).input_ids for text in texts[start:start + batch]]
            width = max(len(seq) for seq in encoded)
            ids = torch.full((len(encoded), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, seq in enumerate(encoded):
                ids[row, width - len(seq):] = torch.tensor(seq)
                mask[row, width - len(seq):] = 1
            model: Any = lm.model  # a transformers causal LM: generate() is GenerationMixin's, unknown to nn.Module
            output = model.generate(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                                       max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
            generated = output[:, width:].cpu()
            predictions += [parse_number(decode_text(tokenizer, row, skip_special_tokens=True)) for row in generated]
    return np.array(predictions, dtype=np.int64)


def run_addition(lm: LoadedModel, pairs: np.ndarray, template: str = "{a}+{b}=", numbers: NumberTokens | None = None,
                 prefix: str = "", use_store: bool = True) -> AdditionResult:
    """Score the model on the given operand pairs; numbers=None means the digit-by-digit (generation) path, whose
    results are kept per process and model and ship precomputed for the page's default prompts (serves the
    Fourier page's addition probe)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(pairs) == 0:
        raise InterpscopeError("No prompts to run.")
    if numbers is None:
        from interpscope.fourier import precomputed

        return precomputed.recall(lm, precomputed.probe_key(pairs, template, prefix),
                                  lambda: _run_addition(lm, pairs, template, None, prefix), AdditionResult,
                                  use_store=use_store)
    return _run_addition(lm, pairs, template, numbers, prefix)


def _run_addition(lm: LoadedModel, pairs: np.ndarray, template: str, numbers: NumberTokens | None,
                  prefix: str) -> AdditionResult:
    texts = [prefix + text for text in render(template, pairs)]
    answers = pairs.sum(axis=1)
    if numbers is not None:
        if answers.max() >= numbers.n_numbers:
            raise InterpscopeError(f"Sums reach {answers.max()}, beyond the {numbers.n_numbers} number tokens.")
        predictions, mode = single_token_predictions(lm, numbers, texts), "argmax"
    else:
        predictions, mode = generated_predictions(lm, texts), "generation"
    exact, near, rough = score(predictions, answers)
    return AdditionResult(model=lm.name, template=template, pairs=pairs, answers=answers, predictions=predictions,
                          accuracy=exact, within_2=near, within_10=rough, mode=mode)


def small_sum_pairs(n_prompts: int, max_sum: int = 99, seed: int = 0) -> np.ndarray:
    """Up to n_prompts operand pairs (a, b >= 0) with a + b <= max_sum (1-2 digit sums by default), sampled."""
    if max_sum < 1:
        raise InterpscopeError("max_sum must be at least 1.")
    grid_a, grid_b = np.meshgrid(np.arange(max_sum + 1), np.arange(max_sum + 1), indexing="ij")
    pairs = np.stack([grid_a.ravel(), grid_b.ravel()], axis=1)
    pairs = pairs[pairs.sum(axis=1) <= max_sum]
    if n_prompts >= len(pairs):
        return pairs
    pick = np.random.default_rng(seed).choice(len(pairs), size=n_prompts, replace=False)
    return pairs[np.sort(pick)]
