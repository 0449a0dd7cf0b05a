"""Induction case study: random token sequences repeated twice. In the second half an induction circuit can copy,
so the model grows confident; Stolfo et al. find entropy neurons respond there (acting against overconfidence).
Here: per-position activation of the chosen and of random neurons, the model's entropy and loss, and the effect
on entropy and loss of mean-ablating each chosen neuron, first half vs second half.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import capture, model_lock
from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.ablation import Neuron, parse_neurons, random_neurons, token_effects
from interpscope.entropy_neurons.metrics import loss_and_entropy
from interpscope.entropy_neurons.store import Progress
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class InductionResult(Result):
    """Per-position means over n_sequences: activation [n_neurons, 2*half_len] of chosen then random neurons,
    entropy and loss [2*half_len]; per neuron: mean activation in each half (divided by the neuron's std over all
    positions, so neurons of different scales compare), and the ablation effects on entropy/loss per half."""

    model: str
    neurons: list[str]
    is_random: list[bool]
    half_len: int
    n_sequences: int
    activation: np.ndarray
    entropy: np.ndarray
    loss: np.ndarray
    first_half_activation: np.ndarray
    second_half_activation: np.ndarray
    standardised_change: np.ndarray
    ablation_entropy_change: dict[str, list[float]]
    ablation_loss_change: dict[str, list[float]]
    ablation_entropy_change_direct: dict[str, list[float]]

    SCHEMA = "interpscope.neurons.induction"
    SCHEMA_VERSION = 1


def _ordinary_tokens(tokenizer, vocab_size: int, counts: np.ndarray | None) -> np.ndarray:
    """Token ids to draw from: ones seen in the corpus (when counts are given), never special tokens."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    limit = min(vocab_size, len(tokenizer)) if tokenizer is not None else vocab_size
    pool = np.arange(limit)
    if counts is not None:
        pool = pool[counts[:limit] > 0]
    pool = np.array([i for i in pool if i not in special])
    if pool.size < 10:
        raise InterpscopeError("Too few ordinary tokens to build random sequences.")
    return pool


def repeated_sequences(tokenizer, vocab_size: int, n_sequences: int, half_len: int, seed: int = 0,
                       counts: np.ndarray | None = None) -> torch.Tensor:
    """[n_sequences, 1 + 2*half_len]: BOS (or EOS when there is no BOS) then random tokens, repeated once."""
    generator = np.random.default_rng(seed)
    pool = _ordinary_tokens(tokenizer, vocab_size, counts)
    halves = generator.choice(pool, size=(n_sequences, half_len), replace=True)
    start_id = getattr(tokenizer, "bos_token_id", None)
    if start_id is None:
        start_id = getattr(tokenizer, "eos_token_id", None)
    start = np.full((n_sequences, 1), 0 if start_id is None else start_id)
    return torch.from_numpy(np.concatenate([start, halves, halves], axis=1)).long()


def induction_study(lm: LoadedModel, neurons, n_sequences: int = 8, half_len: int = 50, n_random: int = 8,
                    seed: int = 0,
                    means: dict[int, np.ndarray] | None = None, counts: np.ndarray | None = None,
                    ablate: bool = True, progress: Progress | None = None) -> InductionResult:
    """Run the repeated-random-tokens study for the chosen neurons against n_random random neurons."""
    if half_len < 2 or n_sequences < 1:
        raise InterpscopeError("Need half_len >= 2 and at least one sequence.")
    adapter = lm.adapter
    chosen = parse_neurons(neurons, adapter)
    randoms = random_neurons(adapter, chosen, n_random, seed)
    everyone = chosen + randoms
    tokens = repeated_sequences(lm.tokenizer, adapter.vocab_size, n_sequences, half_len, seed, counts)
    layers = sorted({n.layer for n in everyone})
    names = [f"blocks.{layer}.mlp.hook_post" for layer in layers]
    with model_lock(lm), torch.no_grad():
        run = capture(adapter, tokens.to(lm.device), names, to_cpu=True)
    logits = run.require_logits().reshape(n_sequences, tokens.shape[1], -1).float()
    loss, entropy = loss_and_entropy(logits[:, 1:-1], tokens[:, 2:])
    acts = np.stack([run.activations[f"blocks.{n.layer}.mlp.hook_post"].reshape(n_sequences, tokens.shape[1], -1)
                     [:, 1:, n.index].float().numpy() for n in everyone])  # [n, S, 2h] after the start token
    per_position = acts.mean(1)
    spread = acts.reshape(len(everyone), -1).std(1) + 1e-8
    first, second = per_position[:, :half_len].mean(1), per_position[:, half_len:].mean(1)
    entropy_np = np.concatenate([entropy.mean(0).numpy(), [np.nan]])
    loss_np = np.concatenate([loss.mean(0).numpy(), [np.nan]])
    ablation_h: dict[str, list[float]] = {}
    ablation_l: dict[str, list[float]] = {}
    ablation_hd: dict[str, list[float]] = {}
    if ablate and means is not None:
        effects = token_effects(lm, chosen, tokens, means, progress=progress)
        positions = tokens.shape[1] - 1
        for i, neuron in enumerate(chosen):
            dh = effects.entropy_total[i].reshape(n_sequences, positions)[:, 1:]
            dl = effects.loss_total[i].reshape(n_sequences, positions)[:, 1:]
            dhd = effects.entropy_direct[i].reshape(n_sequences, positions)[:, 1:]
            ablation_h[neuron.label] = [float(dh[:, :half_len].mean()), float(dh[:, half_len:].mean())]
            ablation_l[neuron.label] = [float(dl[:, :half_len].mean()), float(dl[:, half_len:].mean())]
            ablation_hd[neuron.label] = [float(dhd[:, :half_len].mean()), float(dhd[:, half_len:].mean())]
    return InductionResult(
        model=lm.name, neurons=[n.label for n in everyone], is_random=[n in randoms for n in everyone],
        half_len=half_len, n_sequences=n_sequences, activation=per_position, entropy=entropy_np, loss=loss_np,
        first_half_activation=first, second_half_activation=second, standardised_change=(second - first) / spread,
        ablation_entropy_change=ablation_h, ablation_loss_change=ablation_l,
        ablation_entropy_change_direct=ablation_hd)


__all__ = ["InductionResult", "Neuron", "induction_study", "repeated_sequences"]
