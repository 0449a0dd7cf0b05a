"""The orthonormal Fourier basis over the numbers 0..N-1, period labels, spectra and outlier frequencies.

Row 0 is the constant 1/sqrt(N); then, for k = 1..floor(N/2), sqrt(2/N) cos(2 pi k x / N) and
sqrt(2/N) sin(2 pi k x / N) (for even N the k = N/2 row is the alternating (-1)^x / sqrt(N) and has no sine).
Using omega = 2 pi k / N over exactly N points makes F F^T = I (docs/methods/fourier.md). Period T_k = N / k.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interpscope.config import InterpscopeError


@dataclass(frozen=True)
class FourierBasis:
    """F [N, N] (rows are basis vectors), and for each row its frequency k and kind ('const', 'cos', 'sin')."""

    matrix: np.ndarray
    frequency: np.ndarray
    kind: tuple[str, ...]

    @property
    def n_numbers(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def frequencies(self) -> np.ndarray:
        """The distinct non-zero frequencies k = 1..floor(N/2)."""
        return np.arange(1, self.n_numbers // 2 + 1)

    @property
    def periods(self) -> np.ndarray:
        """Period N / k of each non-zero frequency."""
        return self.n_numbers / self.frequencies

    def rows(self, frequencies) -> np.ndarray:
        """Indices of the basis rows (cos and sin) whose frequency is in the given set."""
        wanted = np.isin(self.frequency, np.asarray(list(frequencies), dtype=int))
        return np.flatnonzero(wanted & (self.frequency > 0))

    def row_labels(self) -> list[str]:
        """Readable name of each row: 'const', 'cos T=10', 'sin T=2.5', ..."""
        labels = []
        for k, kind in zip(self.frequency, self.kind, strict=True):
            labels.append("const" if kind == "const" else f"{kind} T={period_label(self.n_numbers / k)}")
        return labels


def fourier_basis(n_numbers: int) -> FourierBasis:
    """The exact orthonormal basis over 0..N-1 (float64)."""
    if n_numbers < 2:
        raise InterpscopeError("A Fourier basis needs at least 2 numbers.")
    x = np.arange(n_numbers)
    rows = [np.full(n_numbers, 1.0 / np.sqrt(n_numbers))]
    freq, kind = [0], ["const"]
    for k in range(1, n_numbers // 2 + 1):
        angle = 2 * np.pi * k * x / n_numbers
        if 2 * k == n_numbers:
            rows.append(np.cos(angle) / np.sqrt(n_numbers))
            freq.append(k)
            kind.append("cos")
            continue
        rows.append(np.sqrt(2.0 / n_numbers) * np.cos(angle))
        rows.append(np.sqrt(2.0 / n_numbers) * np.sin(angle))
        freq += [k, k]
        kind += ["cos", "sin"]
    return FourierBasis(matrix=np.stack(rows), frequency=np.array(freq), kind=tuple(kind))


def period_label(period: float) -> str:
    """'10', '2.5', '3.33': short text for an axis tick."""
    return f"{period:.2f}".rstrip("0").rstrip(".")


def frequency_magnitude(basis: FourierBasis, values: np.ndarray) -> np.ndarray:
    """Magnitude per non-zero frequency k of values indexed by number (axis 0, [N] or [N, d]).

    Transforms with F, then takes the L2 norm over the cos and sin rows of k (and over the feature axis),
    so a shift of a periodic pattern does not change its magnitude. The constant term is ignored.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] != basis.n_numbers:
        raise InterpscopeError(f"Expected {basis.n_numbers} numbers on axis 0, got {values.shape[0]}.")
    transformed = basis.matrix @ values.reshape(basis.n_numbers, -1)
    squared = (transformed ** 2).sum(axis=1)
    per_k = np.zeros(basis.n_numbers // 2 + 1)
    np.add.at(per_k, basis.frequency, squared)
    return np.sqrt(per_k[1:])


@dataclass(frozen=True)
class Outlier:
    frequency: int
    period: float
    magnitude: float
    score: float


def find_outliers(magnitude: np.ndarray, n_numbers: int, threshold: float = 4.0, top: int = 10) -> list[Outlier]:
    """Frequencies that stand out of the spectrum, strongest first.

    Score = (magnitude - median) / (1.4826 * MAD), a robust z-score; frequencies with score > threshold are
    outliers, at most `top` of them.
    """
    magnitude = np.asarray(magnitude, dtype=np.float64)
    median = float(np.median(magnitude))
    spread = 1.4826 * float(np.median(np.abs(magnitude - median)))
    spread = spread if spread > 1e-12 * max(1.0, abs(median)) else max(1e-12, 1e-6 * abs(median) or 1e-12)
    scores = (magnitude - median) / spread
    order = np.argsort(-magnitude, kind="stable")
    chosen = [int(i) for i in order if scores[i] > threshold][:top]
    return [Outlier(frequency=i + 1, period=n_numbers / (i + 1), magnitude=float(magnitude[i]),
                    score=float(scores[i])) for i in chosen]
