"""Explain a continuation: generate N tokens greedily, then the relevance of every earlier token for each one.

One forward pass under the rules over the whole sequence, then one backward pass per generated token
(retain_graph), giving an output-token x sequence-token matrix.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.generation import greedy_generate
from interpscope.relevance.engine import forward_logits
from interpscope.relevance.rules import Rule, applied


@dataclass
class ContinuationRelevance:
    """matrix[i, j]: relevance of sequence token j for generated token i (zero where j comes after its input)."""

    generated_ids: list[int]
    sequence_ids: list[int]
    matrix: np.ndarray
    logits: np.ndarray


def greedy_continue(adapter: ModelAdapter, input_ids: torch.Tensor, n_new: int) -> list[int]:
    """The next `n_new` greedy tokens after input_ids [1, T] (with the KV cache, interpscope.generation)."""
    return greedy_generate(adapter, input_ids, n_new).tokens[0].tolist()


def continuation_relevance(adapter: ModelAdapter, input_ids: torch.Tensor, n_new: int, rules: Sequence[Rule],
                           progress: Callable[[int, int], None] | None = None) -> ContinuationRelevance:
    """Generate `n_new` tokens and explain each one's logit (the caller holds the model's lock);
    progress(done, n_new) after each explained token."""
    if n_new < 1:
        raise ValueError("n_new must be at least 1")
    generated = greedy_continue(adapter, input_ids, n_new)
    n_input = int(input_ids.shape[1])
    prefix = generated[:-1]
    sequence = torch.cat([input_ids, torch.tensor([prefix], dtype=input_ids.dtype, device=input_ids.device)], 1) \
        if prefix else input_ids
    positions = list(range(n_input - 1, n_input - 1 + n_new))
    rows = []
    with ExitStack() as stack, torch.enable_grad():
        stack.enter_context(applied(adapter, rules))
        embeds = adapter.embedding()(sequence).detach().requires_grad_(True)
        logits = forward_logits(adapter.model, embeds, positions)[0]
        for row, token_id in enumerate(generated):
            (grad,) = torch.autograd.grad(logits[row, token_id], [embeds], retain_graph=row < n_new - 1)
            rows.append((embeds.detach().double() * grad.double())[0].sum(-1))
            if progress is not None:
                progress(row + 1, n_new)
    matrix = torch.stack(rows).cpu().numpy()
    chosen = logits.detach()[torch.arange(n_new), torch.tensor(generated)].double().cpu().numpy()
    return ContinuationRelevance(generated_ids=generated, sequence_ids=sequence[0].tolist(), matrix=matrix,
                                 logits=chosen)
