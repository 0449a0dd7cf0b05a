"""The head finder: every head scored for induction, previous-token and duplicate-token behaviour on repeated random
token sequences, each score beside what a uniform causal pattern would get (chance).

The sequences are [start token, x_1..x_n, x_1..x_n] of random ordinary tokens (interpscope.entropy_neurons.induction).
For a
query at position q = n + j in the second copy (token x_j, first seen at position j):
- induction: attention to position j + 1 = q - n + 1, the token that followed x_j last time;
- duplicate-token: attention to position j = q - n, the earlier occurrence of the same token;
- previous-token: attention to q - 1, over every query from position 1 on.
Chance: the mean over the same queries of 1 / (q + 1), what a head spreading its attention evenly would give.
Optionally the top induction heads are ablated (interpscope.heads.ablation) to measure what they do for
in-context repetition, against as many random heads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

KINDS = ("induction", "previous_token", "duplicate_token")
LABELS = {"induction": "induction", "previous_token": "previous-token", "duplicate_token": "duplicate-token"}
MAX_SEQUENCES, MAX_HALF = 64, 256


def score_queries(kind: str, half: int) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys): the positions whose attention a score averages, for sequences of 1 + 2 * half tokens."""
    if kind == "previous_token":
        q = np.arange(1, 2 * half + 1)
        return q, q - 1
    q = np.arange(half + 1, 2 * half + 1)
    if kind == "induction":
        return q, q - half + 1
    if kind == "duplicate_token":
        return q, q - half
    raise InterpscopeError(f"Unknown head score {kind!r}; known: {', '.join(KINDS)}.")


def score_heads(attention: torch.Tensor, half: int) -> dict[str, np.ndarray]:
    """Scores [L, H] per kind from attention probabilities [L, B, H, S, S] of repeated sequences (S = 1 + 2 * half)."""
    if attention.shape[-1] != 1 + 2 * half:
        raise InterpscopeError(f"Expected sequences of {1 + 2 * half} tokens, got {attention.shape[-1]}.")
    out = {}
    for kind in KINDS:
        q, k = score_queries(kind, half)
        out[kind] = attention[..., q, k].mean(dim=(1, 3)).double().numpy()
    return out


def chance_levels(half: int) -> dict[str, float]:
    """What a uniform causal pattern scores on each kind."""
    return {kind: float(np.mean(1.0 / (score_queries(kind, half)[0] + 1.0))) for kind in KINDS}


@dataclass
class HeadScores(Result):
    """Every head's induction, previous-token and duplicate-token score (schema interpscope.head_scores).

    scores[kind] [L, H]; chance[kind]: a uniform causal pattern's score; the sequences they were measured on; and,
    when asked for, `ablation`: repetition accuracy with the top induction heads ablated against random heads."""

    SCHEMA = "interpscope.head_scores"
    SCHEMA_VERSION = 1

    model: str
    n_sequences: int
    half_len: int
    seed: int
    scores: dict[str, np.ndarray]
    chance: dict[str, float]
    ablation: dict | None = None
    seconds: float = 0.0
    example: list[str] = field(default_factory=list)  # the first sequence's tokens, for the reader

    @property
    def n_layers(self) -> int:
        return int(self.scores[KINDS[0]].shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.scores[KINDS[0]].shape[1])

    def ranked(self, kind: str, k: int | None = None) -> list[tuple[int, int, float]]:
        """(layer, head, score) best first (ties: lower layer, then head)."""
        grid = self.scores[kind]
        order = sorted(((float(grid[layer, head]), layer, head) for layer in range(grid.shape[0])
                        for head in range(grid.shape[1])), key=lambda t: (-t[0], t[1], t[2]))
        return [(layer, head, score) for score, layer, head in order[:k]]

    def top(self, kind: str, k: int = 10) -> list[dict]:
        """The k best heads of one kind, with their score over chance."""
        chance = self.chance[kind]
        return [{"layer": layer, "head": head, "score": score, "over_chance": score / chance if chance else None}
                for layer, head, score in self.ranked(kind, k)]

    def tidy(self) -> list[dict]:
        """One row per head: its three scores."""
        return [{"layer": layer, "head": head, **{kind: float(self.scores[kind][layer, head]) for kind in KINDS}}
                for layer in range(self.n_layers) for head in range(self.n_heads)]

    def payload(self) -> dict[str, Any]:
        return to_plain({
            "model": self.model, "n_layers": self.n_layers, "n_heads": self.n_heads,
            "sequences": {"n": self.n_sequences, "half_len": self.half_len, "seed": self.seed,
                          "example": self.example},
            "chance": self.chance, "scores": self.scores, "top": {kind: self.top(kind) for kind in KINDS},
            "ablation": self.ablation, "seconds": self.seconds})

    def figure(self, kind: str = "induction"):
        """Layers x heads heatmap of one score, chance in the title."""
        from interpscope.figures.heads import grid_figure

        return grid_figure(self.scores[kind], kind, self.chance[kind], title=f"{LABELS[kind]} score")


def find_heads(lm: LoadedModel, *, n_sequences: int = 8, half_len: int = 40, seed: int = 0,
               ablate: int = 0, mode: str = "zero", n_random: int = 5, progress=None) -> HeadScores:
    """Score every head of `lm` on n_sequences repeated random sequences of 2 x half_len tokens; with ablate=k,
    also measure repetition accuracy with the top k induction heads ablated against k random heads (n_random draws).
    progress(fraction, text) is called between stages."""
    from interpscope.capture import model_lock
    from interpscope.entropy_neurons.induction import repeated_sequences
    from interpscope.heads.ablation import induction_ablation
    from interpscope.heads.patterns import attention_probabilities

    if not 1 <= n_sequences <= MAX_SEQUENCES or not 2 <= half_len <= MAX_HALF:
        raise InterpscopeError(f"The head finder takes 1..{MAX_SEQUENCES} sequences of 2..{MAX_HALF} tokens per "
                               f"half (got {n_sequences} of {half_len}).")
    n_total = lm.adapter.n_layers * lm.adapter.n_heads
    if not 0 <= ablate < n_total:
        raise InterpscopeError(f"Can ablate 0..{n_total - 1} heads (got {ablate}).")
    if mode not in ("zero", "mean"):
        raise InterpscopeError(f"Ablation is 'zero' or 'mean' (got {mode!r}).")
    start = time.perf_counter()
    tokens = repeated_sequences(lm.tokenizer, lm.adapter.vocab_size, n_sequences, half_len, seed)
    if progress:
        progress(0.0, "attention on the repeated sequences")
    with model_lock(lm):
        attention = attention_probabilities(lm, tokens)
    scores = score_heads(attention, half_len)
    result = HeadScores(model=lm.name, n_sequences=n_sequences, half_len=half_len, seed=seed, scores=scores,
                        chance=chance_levels(half_len), example=lm.token_strings(tokens[0]))
    if ablate:
        top = [(layer, head) for layer, head, _ in result.ranked("induction", ablate)]
        result.ablation = induction_ablation(lm, tokens, top, mode=mode, n_random=n_random, seed=seed,
                                             progress=progress)
    result.seconds = time.perf_counter() - start
    return result
