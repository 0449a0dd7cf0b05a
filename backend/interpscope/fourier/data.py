"""The addition task: templates, operand pairs and the 80/10/10 split shared by training and the probes.

Recipe of Zhou et al. (2024): numbers 0..N-1 are single tokens, operands a, b < N/2 (so every sum is a number
token), several phrasings of the question, and a split of the (a, b) pairs into train/valid/test (80/10/10).
The templates below are in the paper's style (plain equation plus worded questions), not copied from it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpscope.config import InterpscopeError

TEMPLATES: tuple[str, ...] = (
    "{a}+{b}=",
    "What is {a} plus {b}? Answer:",
    "The sum of {a} and {b} is",
    "Put together {a} and {b}. Answer:",
    "Add {a} to {b}. Result:",
)
DEFAULT_TEMPLATE = TEMPLATES[0]
SPLITS = ("train", "valid", "test")
SPLIT_SEED = 0


def check_template(template: str) -> str:
    """A template must hold exactly one {a} and one {b}; anything else is a clear error."""
    if template.count("{a}") != 1 or template.count("{b}") != 1:
        raise InterpscopeError("A template needs exactly one {a} and one {b}, e.g. '{a}+{b}='.")
    try:
        template.format(a=1, b=2)
    except (KeyError, IndexError, ValueError) as err:
        raise InterpscopeError(f"Template {template!r} has stray braces: {err}") from err
    return template


def operand_pairs(n_numbers: int) -> np.ndarray:
    """All (a, b) with a, b < n_numbers / 2, shape [P, 2], in a fixed order."""
    if n_numbers < 4:
        raise InterpscopeError("Need at least 4 numbers for an addition task.")
    half = (n_numbers + 1) // 2
    grid_a, grid_b = np.meshgrid(np.arange(half), np.arange(half), indexing="ij")
    pairs = np.stack([grid_a.ravel(), grid_b.ravel()], axis=1)
    return pairs[pairs.sum(axis=1) < n_numbers]


def split_pairs(n_numbers: int, split: str, seed: int = SPLIT_SEED) -> np.ndarray:
    """The (a, b) pairs of one split ('train' 80%, 'valid' 10%, 'test' 10%, or 'all'), shape [P, 2]."""
    pairs = operand_pairs(n_numbers)
    if split == "all":
        return pairs
    if split not in SPLITS:
        raise InterpscopeError(f"Unknown split {split!r}: choose train, valid, test or all.")
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_train, n_valid = int(0.8 * len(pairs)), int(0.1 * len(pairs))
    bounds = {"train": (0, n_train), "valid": (n_train, n_train + n_valid), "test": (n_train + n_valid, len(pairs))}
    start, stop = bounds[split]
    return pairs[np.sort(order[start:stop])]


def sample_pairs(n_numbers: int, n_prompts: int, split: str = "test", seed: int = 0) -> np.ndarray:
    """Up to n_prompts pairs of a split, drawn without replacement (all of them when fewer exist)."""
    if n_prompts < 1:
        raise InterpscopeError("Ask for at least one prompt.")
    pairs = split_pairs(n_numbers, split)
    if n_prompts >= len(pairs):
        return pairs
    pick = np.random.default_rng(seed).choice(len(pairs), size=n_prompts, replace=False)
    return pairs[np.sort(pick)]


def render(template: str, pairs: np.ndarray) -> list[str]:
    """The prompt text of each pair."""
    check_template(template)
    return [template.format(a=int(a), b=int(b)) for a, b in pairs]


@dataclass
class PromptPairs:
    """The operand pairs that run for a request of `requested` prompts, and why fewer run when they do (made by
    interpscope.fourier.probe.prompt_pairs; the filter table keeps the request)."""

    pairs: np.ndarray
    requested: int
    split: str
    n_numbers: int

    @property
    def note(self) -> str | None:
        """None when every requested prompt runs; else the reason, ready for the page and the command line."""
        if len(self.pairs) >= self.requested:
            return None
        everything = len(split_pairs(self.n_numbers, "all"))
        hint = f" (choose split 'all' for up to {everything})" if self.split != "all" else ""
        return (f"Asked for {self.requested} prompts; the {self.split} split of N = {self.n_numbers} holds only "
                f"{len(self.pairs)} distinct operand pairs, so all {len(self.pairs)} run{hint}.")
