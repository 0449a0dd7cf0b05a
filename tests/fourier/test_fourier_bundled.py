"""SmolLM2 splits numbers into digits: hidden-state spectra at each number's last digit, and clear refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest

from interpscope.cli import main
from interpscope.fourier.addition import run_addition
from interpscope.fourier.numbers import splits_digits
from interpscope.fourier.spectra import hidden_spectra

pytestmark = pytest.mark.bundled


def test_embedding_row_depends_only_on_the_last_digit(bundled_lm):
    assert splits_digits(bundled_lm.tokenizer)
    spectra = hidden_spectra(bundled_lm, 100)
    assert spectra.magnitude.shape == (bundled_lm.adapter.n_layers + 1, 50)
    embed = spectra.magnitude[0]
    multiples_of_10 = np.arange(1, 51) % 10 == 0  # k = 10, 20, ... -> periods 10, 5, 3.33, 2.5, 2
    assert embed[~multiples_of_10].max() < 1e-6 * embed.max()
    assert spectra.top_periods[0][:2] == [10.0, 5.0]
    assert np.allclose(np.linalg.norm(spectra.magnitude, axis=1), 1.0)
    deeper = spectra.magnitude[5]
    assert deeper[~multiples_of_10].max() > 1e-3  # later layers mix in the tens digit


def test_cli_spectrum_uses_hidden_states_and_filter_refuses(bundled_lm, capsys):
    assert main(["fourier", "spectrum", "--model", "smollm2-135m", "--numbers", "40", "--layer", "3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["source"] == "hidden" and result["layer"] == 3 and len(result["magnitude"]) == 20
    assert main(["fourier", "filter", "--model", "smollm2-135m", "--kind", "low", "--modules", "attn"]) == 2
    assert "splits numbers into digits" in capsys.readouterr().err


def test_generation_probe_parses_answers(bundled_lm):
    result = run_addition(bundled_lm, np.array([[2, 3], [10, 20]]), "{a}+{b}=", prefix="1+1=2\n4+5=9\n")
    assert result.mode == "generation" and result.answers.tolist() == [5, 30]
    assert all(p >= 0 for p in result.predictions)  # the model answers with a number


def test_digit_baseline_is_shown_and_its_periods_are_never_outliers(bundled_lm, capsys):
    spectra = hidden_spectra(bundled_lm, 100)
    assert spectra.baseline_periods == pytest.approx([10.0, 5.0, 10 / 3, 2.5, 2.0])
    assert spectra.baseline_share[0] == pytest.approx(1.0) and spectra.outlier_periods[0] == []
    assert spectra.baseline_share[-1] < 0.9  # deeper layers carry more than the last digit
    built_in = np.array(spectra.baseline_periods)
    assert not any(np.isclose(built_in, p).any() for layer in spectra.outlier_periods for p in layer)
    assert main(["fourier", "spectrum", "--model", "smollm2-135m", "--numbers", "100", "--layer", "-1",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["baseline_share"] == pytest.approx(1.0) and result["outliers"] == []
    assert "explains 100.0% of this spectrum's power" in result["reading"]
