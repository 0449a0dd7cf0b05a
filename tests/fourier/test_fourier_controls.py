"""The controls beside the Fourier views (issue 21): same-rank random-subspace filters, specificity, and the
tokenisation baseline of digit tokenisers."""
from __future__ import annotations

import numpy as np
import pytest

from interpscope.fourier.baseline import by_construction_periods, digit_baseline
from interpscope.fourier.basis import fourier_basis
from interpscope.fourier.controls import compare, control_fields, control_projection, random_number_basis, removed_rank
from interpscope.fourier.filters import FilterRow, FilterTable, null_projection, reading, removed_frequencies
from interpscope.fourier.spectra import baseline_sentence, describe_regime, matrix_spectrum

N, D = 100, 128
TAU = 25  # the planted band k < 25: 48 of the 100 functions of the numbers


@pytest.fixture(scope="module")
def unembed() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(D, N))


@pytest.mark.parametrize("rank", [18, 81])
def test_control_removes_exactly_the_filters_rank_and_is_deterministic(unembed, rank):
    basis = fourier_basis(N)
    kind = "high" if rank == 18 else "low"
    fourier = null_projection(unembed, basis, basis.rows(removed_frequencies(kind, 10, N)))
    assert fourier.rank == rank
    control = control_projection(unembed, fourier.rank, seed=0)
    assert removed_rank(control) == removed_rank(fourier.matrix) == rank
    assert np.allclose(control, control.T) and np.allclose(control @ control, control)
    assert np.array_equal(control, control_projection(unembed, rank, seed=0))
    assert not np.allclose(control, control_projection(unembed, rank, seed=1))
    outside = np.linalg.svd(unembed, full_matrices=True)[0][:, N:]  # directions W_U_num cannot read
    assert np.allclose(control @ outside, outside)  # the control only removes number directions
    rows = random_number_basis(N, rank, seed=0)
    assert np.allclose(rows @ rows.T, np.eye(rank))
    assert np.abs(rows @ unembed.T @ control).max() < 1e-9 * np.abs(unembed).max()


def test_specificity_is_the_ratio_of_effects_and_undefined_when_controls_cost_nothing():
    result = compare(0.9, 0.1, [0.8, 0.7, 0.9], [0, 1, 2], prompts=500)
    assert result.effect == pytest.approx(0.8) and result.effect_mean == pytest.approx(0.1)
    assert result.specificity == pytest.approx(8.0) and result.verdict == "more damaging than"
    assert result.effect_sd == pytest.approx(np.std([0.1, 0.2, 0.0], ddof=1))
    free = compare(0.9, 0.5, [0.9, 0.9, 0.9], [0, 1, 2], prompts=500)
    assert free.specificity is None and "specificity" not in control_fields(free)
    one_prompt = compare(0.9, 0.5, [0.898, 0.898, 0.898], [0, 1, 2], prompts=500)  # the controls cost one prompt
    assert one_prompt.specificity is None and one_prompt.verdict == "more damaging than"
    same = compare(0.9, 0.5, [0.45, 0.5, 0.55], [0, 1, 2], prompts=500)
    assert same.specificity == pytest.approx(1.0) and same.verdict == "no more damaging than"
    assert compare(0.9, 0.7, [0.1, 0.12, 0.08], [0, 1, 2], prompts=500).verdict == "less damaging than"
    assert control_fields(None) == {}


def planted_table(carrier: str) -> FilterTable:
    """Argmax readout of planted states through W_U_num: the answer a's state carries the one-hot of a, filtered
    to the frequencies k < TAU (carrier 'fourier') or to a random subspace of as many functions (carrier 'random').
    The filter table's rows are measured on it: no filter, the Fourier filters, and their same-rank controls."""
    rng = np.random.default_rng(0)
    unembed = rng.normal(size=(D, N))
    basis = fourier_basis(N)
    low = basis.matrix[basis.rows(removed_frequencies("high", TAU, N))]
    carrier_rows = low if carrier == "fourier" else random_number_basis(N, len(low), seed=99)
    targets = np.eye(N) @ carrier_rows.T @ carrier_rows  # row a: the carried part of the one-hot of a
    states = np.linalg.lstsq(unembed.T, targets.T, rcond=None)[0].T  # W_U^T h_a = targets[a]
    answers = np.arange(N)

    def accuracy(projection: np.ndarray) -> float:
        return float(np.mean((states @ projection @ unembed).argmax(axis=1) == answers))

    clean = accuracy(np.eye(D))
    rows = [FilterRow(kind="none", modules="none", removed="nothing", loss=0.0, accuracy=clean, within_2=clean,
                      within_10=clean, rank=0, zeroes_everything=False, errors=np.zeros(0))]
    for kind in ("high", "low"):
        fourier = null_projection(unembed, basis, basis.rows(removed_frequencies(kind, TAU, N)))
        filtered = accuracy(fourier.matrix)
        controls = [accuracy(control_projection(unembed, fourier.rank, seed)) for seed in range(5)]
        rows.append(FilterRow(kind=kind, modules="both", removed="", loss=0.0, accuracy=filtered, within_2=filtered,
                              within_10=filtered, rank=fourier.rank, zeroes_everything=False, errors=np.zeros(0),
                              control=compare(clean, filtered, controls, list(range(5)), N)))
    return FilterTable(model="planted", template="{a}+{b}=", numbers=N, tau=TAU, d_model=D, prompts=N,
                       positions="last", rows=rows, seconds=0.0, control_seeds=list(range(5)))


def test_planted_fourier_answer_makes_the_filter_far_more_specific_than_its_control():
    table = planted_table("fourier")
    clean, no_low = table.rows[0], table.rows[1]
    assert clean.accuracy == 1.0 and no_low.kind == "high" and no_low.accuracy < 0.1
    assert no_low.control.specificity > 3 and no_low.control.verdict == "more damaging than"
    sentence = reading(table)
    assert "more damaging than a random subspace" in sentence and "Beyond the control" in sentence
    assert f"specificity {no_low.control.specificity:.2f}" in sentence


def test_planted_random_answer_makes_the_sentence_say_the_filter_is_not_specific():
    table = planted_table("random")
    assert table.rows[0].accuracy == 1.0
    assert all(row.control.verdict != "more damaging than" for row in table.rows[1:])
    sentence = reading(table)
    assert "No filter is clearly more damaging (specificity >= 1.2, beyond two control sds) than removing a " \
        "random subspace of the same rank" in sentence
    assert "regime" not in sentence and "Beyond the control" not in sentence


def test_a_pure_function_of_the_last_digit_is_all_baseline_and_never_an_outlier():
    periods = by_construction_periods(N)
    assert periods == pytest.approx([10.0, 5.0, 10 / 3, 2.5, 2.0])
    states = np.random.default_rng(1).normal(size=(10, 48))[np.arange(N) % 10]
    base = digit_baseline(states)
    assert base.share == pytest.approx(1.0) and base.outliers == []
    spectrum = matrix_spectrum(states, source="hidden", matrix="hidden", digits=True)
    energy = spectrum.magnitude ** 2
    at_baseline = np.isin(np.round(spectrum.periods, 9), np.round(periods, 9))
    assert energy[at_baseline].sum() / energy.sum() == pytest.approx(1.0)
    assert spectrum.outliers == [] and spectrum.baseline_share == pytest.approx(1.0)
    regime = describe_regime(spectrum)
    assert not regime.fourier_features and "by the digit tokenisation" in regime.label
    sentence = baseline_sentence(spectrum)
    assert "explains 100.0% of this spectrum's power" in sentence and "Nothing stands above it" in sentence


def test_a_feature_beyond_the_last_digit_is_found_above_the_baseline():
    x = np.arange(N)
    rng = np.random.default_rng(2)
    states = rng.normal(size=(10, 48))[x % 10] + 2.0 * np.outer(np.cos(2 * np.pi * 4 * x / N), rng.normal(size=48))
    base = digit_baseline(states)
    assert 0.05 < base.share < 0.95
    assert [round(o.period, 6) for o in base.outliers] == [25.0]


def test_shuffled_control_keeps_planted_periods_and_drops_noise():
    x = np.arange(N)
    rng = np.random.default_rng(4)
    planted = np.outer(np.cos(2 * np.pi * x / 10), rng.normal(size=32)) + np.outer((-1.0) ** x, rng.normal(size=32))
    spectrum = matrix_spectrum(planted + 0.3 * rng.normal(size=(N, 32)))
    assert sorted(round(o.period, 6) for o in spectrum.outliers) == [2.0, 10.0]
    assert all(o.magnitude > spectrum.baseline_magnitude[o.frequency - 1] for o in spectrum.outliers)
    assert matrix_spectrum(rng.normal(size=(N, 32))).outliers == []
