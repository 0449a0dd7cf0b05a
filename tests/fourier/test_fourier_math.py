"""docs/methods/fourier.md checks: basis, spectra, outliers, filters and the rank check, on synthetic data."""
from __future__ import annotations

import numpy as np
import pytest

from interpscope.config import InterpscopeError
from interpscope.fourier.addition import score, small_sum_pairs
from interpscope.fourier.basis import find_outliers, fourier_basis, frequency_magnitude, period_label
from interpscope.fourier.data import check_template, operand_pairs, render, split_pairs
from interpscope.fourier.filters import error_counts, null_projection, removed_frequencies
from interpscope.fourier.lens import default_tau, low_share, top_components
from interpscope.fourier.spectra import matrix_spectrum


@pytest.mark.parametrize("n_numbers", [2, 7, 10, 100, 201, 520])
def test_basis_is_orthonormal(n_numbers):
    basis = fourier_basis(n_numbers)
    assert basis.matrix.shape == (n_numbers, n_numbers)
    np.testing.assert_allclose(basis.matrix @ basis.matrix.T, np.eye(n_numbers), atol=1e-12)
    assert sorted(set(basis.frequency.tolist())) == list(range(n_numbers // 2 + 1))


def test_periods_and_labels():
    basis = fourier_basis(520)
    assert basis.periods[51] == pytest.approx(10.0)
    assert basis.periods[-1] == pytest.approx(2.0)
    assert [period_label(p) for p in (10.0, 2.5, 520 / 3)] == ["10", "2.5", "173.33"]
    assert basis.row_labels()[:3] == ["const", "cos T=520", "sin T=520"]


def test_synthetic_embedding_peaks_at_its_periods():
    n_numbers = 200
    x = np.arange(n_numbers)
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(3, 16))
    embedding = (np.outer(np.cos(2 * np.pi * x / 10), directions[0]) + np.outer((-1.0) ** x, directions[1])
                 + np.outer(x / n_numbers, directions[2]) * 5 + 0.01 * rng.normal(size=(n_numbers, 16)))
    spectrum = matrix_spectrum(embedding)
    top3 = {round(float(p), 6) for p in spectrum.periods[np.argsort(-spectrum.magnitude)[:3]]}
    assert top3 == {10.0, 2.0, 200.0}
    outlier_periods = {round(o.period, 6) for o in spectrum.outliers}
    assert {10.0, 2.0, 200.0} <= outlier_periods


def test_shift_does_not_change_magnitude():
    basis = fourier_basis(60)
    x = np.arange(60)
    a = frequency_magnitude(basis, np.cos(2 * np.pi * x / 5))
    b = frequency_magnitude(basis, np.cos(2 * np.pi * (x + 2) / 5))
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert np.argmax(a) == 11  # k = 12 -> period 5


def test_outliers_of_a_flat_spectrum_are_none():
    assert find_outliers(np.ones(50), 100) == []
    noisy = 1 + 0.01 * np.random.default_rng(1).normal(size=50)
    noisy[19] = 5.0
    outliers = find_outliers(noisy, 100)
    assert [o.frequency for o in outliers] == [20] and outliers[0].period == pytest.approx(5.0)


def _random_unembedding(d_model: int, n_numbers: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(d_model, n_numbers))


@pytest.mark.parametrize("kind", ["low", "high"])
def test_filter_constraint_idempotence_symmetry(kind):
    n_numbers, d_model, tau = 100, 256, 10
    basis = fourier_basis(n_numbers)
    unembed = _random_unembedding(d_model, n_numbers)
    rows = basis.rows(removed_frequencies(kind, tau, n_numbers))
    projection = null_projection(unembed, basis, rows)
    P = projection.matrix
    assert not projection.zeroes_everything
    h = np.random.default_rng(2).normal(size=(d_model, 5))
    removed = basis.matrix[rows] @ unembed.T @ (P @ h)
    assert np.abs(removed).max() <= 1e-13 * max(1.0, np.abs(basis.matrix[rows] @ unembed.T @ h).max())
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    kept = np.setdiff1d(np.flatnonzero(basis.frequency > 0), rows)
    before = basis.matrix[kept] @ unembed.T @ h
    after = basis.matrix[kept] @ unembed.T @ (P @ h)
    assert np.abs(after - before).max() > 1e-3  # the projection is not the identity on the rest ...
    assert np.linalg.norm(P @ h) > 0.1 * np.linalg.norm(h)  # ... and keeps most of h


def test_removed_frequencies_split_at_tau():
    assert list(removed_frequencies("high", 10, 100)) == list(range(1, 10))
    assert list(removed_frequencies("low", 10, 100)) == list(range(10, 51))
    assert default_tau(520) == 52 and default_tau(200) == 20
    with pytest.raises(InterpscopeError):
        removed_frequencies("band", 10, 100)


def test_rank_check_fires_for_n100_d64_tau10():
    n_numbers, d_model, tau = 100, 64, 10
    basis = fourier_basis(n_numbers)
    unembed = _random_unembedding(d_model, n_numbers)
    low_pass = null_projection(unembed, basis, basis.rows(removed_frequencies("low", tau, n_numbers)))
    high_pass = null_projection(unembed, basis, basis.rows(removed_frequencies("high", tau, n_numbers)))
    assert low_pass.removed_rows == 81 and low_pass.rank == 64 and low_pass.zeroes_everything
    np.testing.assert_allclose(low_pass.matrix, 0, atol=1e-10)
    assert high_pass.rank == 18 and not high_pass.zeroes_everything


def test_top_components_rebuild_a_sparse_prediction():
    n_numbers = 100
    basis = fourier_basis(n_numbers)
    coefficients = np.zeros(n_numbers)
    chosen = [1, 2, 19, 20, 99]  # cos/sin T=100, cos/sin T=10, cos T=2
    coefficients[chosen] = [5.0, -4.0, 3.0, 2.5, 2.0]
    logits = basis.matrix.T @ coefficients + 7.0
    result = top_components(logits, top=5)
    np.testing.assert_allclose(result.rebuilt, logits - logits.mean(), atol=1e-10)
    assert result.rebuilt_argmax == result.predicted
    assert result.labels[0] == "cos T=100" and set(np.round(result.periods, 6)) == {100.0, 10.0, 2.0}


def test_low_share():
    basis = fourier_basis(100)
    x = np.arange(100)
    assert low_share(basis, np.cos(2 * np.pi * x / 50), tau=10) == pytest.approx(1.0)
    assert low_share(basis, np.cos(2 * np.pi * x / 5), tau=10) == pytest.approx(0.0, abs=1e-20)


def test_split_is_80_10_10_and_disjoint():
    pairs = {tuple(p) for p in operand_pairs(200)}
    parts = {name: {tuple(p) for p in split_pairs(200, name)} for name in ("train", "valid", "test")}
    assert len(pairs) == 100 * 100
    assert sum(len(p) for p in parts.values()) == len(pairs)
    assert parts["train"] | parts["valid"] | parts["test"] == pairs
    assert len(parts["train"]) == 8000 and len(parts["valid"]) == 1000 and len(parts["test"]) == 1000
    assert all(a + b < 200 for a, b in pairs)


def test_templates_and_scores():
    assert render("{a}+{b}=", np.array([[3, 4]])) == ["3+4="]
    with pytest.raises(InterpscopeError):
        check_template("{a} plus")
    exact, near, rough = score(np.array([10, 12, 19, -1]), np.array([10, 10, 10, 10]))
    assert (exact, near, rough) == (0.25, 0.5, 0.75)
    pairs = small_sum_pairs(50, max_sum=99)
    assert len(pairs) == 50 and pairs.sum(axis=1).max() <= 99


def test_error_counts():
    errors = np.array([0, 10, -20, 3, -5, 7, np.nan, 0])
    counts = error_counts(errors)
    assert counts == {"wrong": 6, "multiple_of_10": 2, "small_lt_6": 2, "other": 1, "not_a_number": 1}


def test_last_position_edit_touches_only_the_answer_position():
    import torch

    from interpscope.fourier.filters import projection_edit

    matrix = torch.as_tensor(np.diag([1.0, 0.0, 1.0]))
    output = torch.arange(24, dtype=torch.float64).reshape(2, 4, 3) + 1
    where = {"last": torch.tensor([3, 1])}
    edited = projection_edit(matrix, where)(output)
    assert edited[0, 3, 1] == 0 and edited[1, 1, 1] == 0
    untouched = torch.ones(2, 4, dtype=torch.bool)
    untouched[0, 3] = untouched[1, 1] = False
    assert torch.equal(edited[untouched], output[untouched])
    assert torch.equal(projection_edit(matrix)(output)[..., 1], torch.zeros(2, 4, dtype=torch.float64))


def test_the_filter_reading_follows_the_numbers():
    from interpscope.fourier.filters import FilterRow, FilterTable, reading

    def table(base: float, no_high: float, no_low: float) -> FilterTable:
        rows = [FilterRow(kind=k, modules=m, removed="", loss=0.0, accuracy=a, within_2=a, within_10=a, rank=0,
                          zeroes_everything=False, errors=np.zeros(0), error_counts={})
                for k, m, a in (("none", "none", base), ("low", "both", no_high), ("high", "both", no_low))]
        return FilterTable(model="m", template="{a}+{b}=", numbers=100, tau=10, d_model=32, prompts=500,
                           positions="last", rows=rows, seconds=0.0)

    scratch = reading(table(0.9, 0.88, 0.1))
    assert "costs 80.0% accuracy and removing high frequencies 2.0%" in scratch and "from-scratch" in scratch
    both = reading(table(0.99, 0.2, 0.05))
    assert "needs both bands" in both and "from-scratch" not in both
    mixed = reading(table(0.8, 0.03, 0.5))  # removing high costs 96%: never called the from-scratch regime
    assert "from-scratch" not in mixed and "High frequencies matter more" in mixed
    assert "cannot be read" in reading(table(0.05, 0.05, 0.05))
