"""Baselines for number spectra: what a spectrum shows by construction, so that only power above it is a finding.

Digit tokenisers (SmolLM2, Gemma): a number's representation is the hidden state at its last digit, whose input is
the embedding of that digit, a pure function of n mod 10. A function of n mod 10 over 0..N-1 has its power only
at the frequencies k that are multiples of N/10 (periods 10, 5, 3.33, 2.5, 2 when 10 divides N): those periods are
there by construction. The baseline of a layer is the part of its states that a function of n mod 10 explains
(the per-residue mean, an orthogonal projection); its share of the (non-constant) power is reported, and
outliers are looked for in what is left.

Single-token numbers: the control is the same embedding with its rows shuffled among the numbers (seeded); a
frequency is an outlier only if it is a robust-z outlier and stronger than every shuffle gave it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpscope.fourier.basis import Outlier, find_outliers, fourier_basis, frequency_magnitude

DIGIT_BASE = 10
SHUFFLES = 20


def residue_means(values: np.ndarray, base: int = DIGIT_BASE) -> np.ndarray:
    """Each row replaced by the mean of the rows with the same n mod base (values indexed by n = 0..N-1): the
    orthogonal projection of every feature onto the functions of n mod base."""
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    residue = np.arange(len(values)) % base
    means = np.zeros((base, values.shape[1]))
    np.add.at(means, residue, values)
    means /= np.maximum(np.bincount(residue, minlength=base), 1)[:, None]
    return means[residue]


def by_construction_periods(n_numbers: int, base: int = DIGIT_BASE, share: float = 1e-9) -> list[float]:
    """Periods at which a pure function of n mod base has power over 0..N-1 (10, 5, 3.33, 2.5, 2 for N = 100)."""
    basis = fourier_basis(n_numbers)
    indicator = np.eye(base)[np.arange(n_numbers) % base]
    energy = frequency_magnitude(basis, indicator) ** 2
    return [float(p) for p in basis.periods[energy > share * energy.sum()]]


@dataclass
class DigitBaseline:
    """Of one layer's states: the share of non-constant power a function of n mod 10 explains, the baseline's
    magnitude per frequency, the residual's, and the outliers of the residual (above the baseline)."""

    share: float
    magnitude: np.ndarray
    residual: np.ndarray
    outliers: list[Outlier]


def digit_baseline(states: np.ndarray, threshold: float = 4.0, base: int = DIGIT_BASE) -> DigitBaseline:
    """The tokenisation baseline of states [N, d] (see the module doc); outliers are robust-z outliers of the
    residual spectrum that also exceed the baseline's magnitude at their frequency."""
    states = np.asarray(states, dtype=np.float64).reshape(len(states), -1)
    basis = fourier_basis(len(states))
    centred = states - states.mean(axis=0)
    explained = residue_means(centred, base)
    total = float((centred ** 2).sum())
    share = float((explained ** 2).sum() / total) if total > 0 else 0.0
    magnitude = frequency_magnitude(basis, explained)
    residual = frequency_magnitude(basis, centred - explained)
    scale = float(np.linalg.norm(frequency_magnitude(basis, centred)))
    outliers = [] if scale == 0 or residual.max(initial=0.0) <= 1e-9 * scale else [
        o for o in find_outliers(residual, len(states), threshold=threshold)
        if o.magnitude > magnitude[o.frequency - 1]]
    return DigitBaseline(share=share, magnitude=magnitude, residual=residual, outliers=outliers)


def shuffled_control(values: np.ndarray, shuffles: int = SHUFFLES, seed: int = 0) -> np.ndarray:
    """Per frequency, the largest magnitude over `shuffles` seeded permutations of the rows of values [N, d]: what
    the same vectors give when their assignment to numbers is random."""
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    basis = fourier_basis(len(values))
    rng = np.random.default_rng(seed)
    return np.max([frequency_magnitude(basis, values[rng.permutation(len(values))]) for _ in range(shuffles)], axis=0)


def outliers_above(magnitude: np.ndarray, control: np.ndarray, n_numbers: int, threshold: float = 4.0) -> list[Outlier]:
    """Robust-z outliers of the spectrum that are also stronger than the control at their frequency."""
    return [o for o in find_outliers(magnitude, n_numbers, threshold=threshold)
            if o.magnitude > control[o.frequency - 1]]
