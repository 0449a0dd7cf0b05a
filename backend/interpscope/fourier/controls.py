"""Controls for the frequency filters: the same-rank random-subspace filter, and the specificity it defines.

A Fourier filter removes rank(M) directions, M = B F W_U_num^T: the directions W_U_num carries for the chosen
functions of the numbers (the rows of B F, cosines and sines over 0..N-1). Removing that many number directions can
hurt whatever they are, so each filter is set beside a control built the same way from a random subspace of the
same rank: M_c = R W_U_num^T, R a Haar-random orthonormal set of rank(M) functions of the numbers (one per seed).
Both remove a subspace of the same rank from the same number-direction space span(W_U_num), weighted by W_U_num
in the same way; only the choice of functions (Fourier or random) differs. Then

    effect = clean accuracy - filtered accuracy,    specificity = filter effect / mean control effect.

Specificity is left out (None) when the controls cost (almost) nothing: at most one prompt on average.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpscope.config import InterpscopeError

DEFAULT_CONTROL_SEEDS = 5


def random_number_basis(n_numbers: int, rank: int, seed: int) -> np.ndarray:
    """rank orthonormal rows [rank, N] spanning a Haar-random rank-dimensional subspace of R^N (functions of the
    numbers 0..N-1), drawn deterministically: the same (N, rank, seed) always gives the same rows."""
    if not 0 <= rank <= n_numbers:
        raise InterpscopeError(f"A control of rank {rank} does not fit in {n_numbers} numbers.")
    rng = np.random.default_rng([int(seed), int(rank), int(n_numbers), 21])
    q, r = np.linalg.qr(rng.standard_normal((n_numbers, rank)))
    return (q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))).T


def null_space_projector(constraint: np.ndarray) -> tuple[np.ndarray, int]:
    """(P, rank(M)) with P = I - M^+ M the orthogonal projector onto null(M), M [rows, d_model] (float64; the
    rank uses the usual SVD tolerance)."""
    constraint = np.asarray(constraint, dtype=np.float64)
    d_model = constraint.shape[1]
    if constraint.shape[0] == 0:
        return np.eye(d_model), 0
    singular = np.linalg.svd(constraint, compute_uv=False)
    tolerance = singular.max() * max(constraint.shape) * np.finfo(np.float64).eps
    rank = int(np.sum(singular > tolerance))
    return np.eye(d_model) - np.linalg.pinv(constraint, rcond=tolerance / singular.max()) @ constraint, rank


def control_projection(unembed_num: np.ndarray, rank: int, seed: int) -> np.ndarray:
    """P = I - M^+ M for M = R W_U_num^T, R = random_number_basis(N, rank, seed): the filter's own construction
    with the chosen Fourier rows B F replaced by a random orthonormal basis of the same size (unembed_num is W_U_num
    [d_model, N]; rank at most rank(W_U_num), so M has exactly that rank)."""
    unembed_num = np.asarray(unembed_num, dtype=np.float64)
    rows = random_number_basis(unembed_num.shape[1], rank, seed)
    return null_space_projector(rows @ unembed_num.T)[0]


def removed_rank(projection: np.ndarray) -> int:
    """How many directions a projection removes: d_model - rank(P) (P an orthogonal projector)."""
    return int(projection.shape[0] - np.linalg.matrix_rank(projection, hermitian=True))


@dataclass
class Control:
    """The random-subspace controls of one filter row: their accuracies (one per seed) and the comparison."""

    seeds: list[int]
    accuracies: list[float]
    accuracy_mean: float
    accuracy_sd: float
    effect: float
    effect_mean: float
    effect_sd: float
    specificity: float | None
    verdict: str


SPECIFIC = 1.2  # a filter must cost at least this many times the control's mean effect to count as specific


def compare(clean: float, filtered: float, control_accuracies: list[float], seeds: list[int],
            prompts: int) -> Control:
    """Effects, specificity and a verdict from the numbers. Beyond the noise means: the filter's effect exceeds the
    controls' mean effect by more than two of their standard deviations and by more than one prompt. Then the
    filter is 'more damaging than' the control when its specificity is at least SPECIFIC, else 'barely more
    damaging than'; 'less damaging than' in the mirror case; otherwise 'no more damaging than'."""
    accuracies = np.asarray(control_accuracies, dtype=np.float64)
    effects = clean - accuracies
    effect = clean - filtered
    mean, sd = float(effects.mean()), float(effects.std(ddof=1)) if len(effects) > 1 else 0.0
    floor = 1.0 / max(1, prompts)
    specificity = effect / mean if mean > floor + 1e-12 else None
    margin = max(2 * sd, 1.0 / max(1, prompts))
    if effect > mean + margin:
        verdict = "more damaging than" if specificity is None or specificity >= SPECIFIC else \
            "barely more damaging than"
    elif effect < mean - margin:
        verdict = "less damaging than"
    else:
        verdict = "no more damaging than"
    return Control(seeds=list(seeds), accuracies=[float(a) for a in accuracies], accuracy_mean=float(accuracies.mean()),
                   accuracy_sd=float(accuracies.std(ddof=1)) if len(accuracies) > 1 else 0.0, effect=float(effect),
                   effect_mean=mean, effect_sd=sd, specificity=specificity, verdict=verdict)


def describe(label: str, control: Control, rank: int) -> str:
    """One clause: 'the high-pass on attn + MLP (rank 18) costs 12.0 points, no more damaging than a random
    subspace of the same rank (10.1 ± 3.2 points; specificity 1.19)'."""
    ratio = f"; specificity {control.specificity:.2f}" if control.specificity is not None else \
        "; specificity undefined: the controls cost nothing"
    return (f"{label} (rank {rank}) costs {100 * control.effect:.1f} points, {control.verdict} a random subspace of "
            f"the same rank ({100 * control.effect_mean:.1f} ± {100 * control.effect_sd:.1f} points over "
            f"{len(control.seeds)} seeds{ratio})")


def control_fields(control: Control | None) -> dict:
    """The control's figures as flat fields of a filter row (absent, not 0, when no control was run; specificity
    absent when undefined): the same keys in the CLI's JSON and the page's table and export."""
    if control is None:
        return {}
    fields = {"effect": control.effect, "control_accuracy_mean": control.accuracy_mean,
              "control_accuracy_sd": control.accuracy_sd, "control_accuracies": control.accuracies,
              "control_seeds": control.seeds, "control_effect_mean": control.effect_mean,
              "control_effect_sd": control.effect_sd, "verdict": control.verdict}
    if control.specificity is not None:
        fields["specificity"] = control.specificity
    return fields
