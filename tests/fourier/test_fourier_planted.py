"""A tiny GPT-2-config model with planted period-10 and period-2 number embeddings, through the command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from interpscope.cli import main
from tests.conftest import N_NUMBERS


def _run_json(capsys, argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    if argv[:2] == ["fourier", "filter"]:  # one filter is the filter table of two rows: read the filter's row
        assert document["schema"] == "interpscope.fourier.filter_table" and len(document["rows"]) == 2
        return {**document, **document["rows"][1], "baseline": document["rows"][0]}
    return document


def test_spectrum_reports_planted_periods_as_top_outliers(planted_folder, capsys):
    result = _run_json(capsys, ["fourier", "spectrum", "--model", str(planted_folder), "--json"])
    assert result["source"] == "embedding" and result["numbers"] == N_NUMBERS
    assert len(result["periods"]) == len(result["magnitude"]) == N_NUMBERS // 2
    top_two = sorted(round(o["period"], 6) for o in result["outliers"][:2])
    assert top_two == [2.0, 10.0]
    assert result["outliers"][0]["magnitude"] >= result["outliers"][1]["magnitude"] > 5 * np.median(
        result["magnitude"])


def test_hidden_spectrum_at_embeddings_keeps_the_planted_periods(planted_folder, capsys):
    result = _run_json(capsys, ["fourier", "spectrum", "--model", str(planted_folder), "--layer", "-1", "--json"])
    assert result["source"] == "hidden" and result["layer"] == -1
    assert sorted(round(o["period"], 6) for o in result["outliers"][:2]) == [2.0, 10.0]


def test_unembedding_spectrum_of_random_weights_has_no_planted_peak(planted_folder, capsys):
    result = _run_json(capsys, ["fourier", "spectrum", "--model", str(planted_folder), "--matrix", "unembedding",
                                "--json"])
    assert not {10.0, 2.0} <= {round(o["period"], 6) for o in result["outliers"][:2]}


def test_filter_reports_rank_check_and_histogram(planted_folder, capsys):
    low = _run_json(capsys, ["fourier", "filter", "--model", str(planted_folder), "--kind", "low", "--modules",
                             "both", "--tau", "10", "--prompts", "40", "--json"])
    assert low["zeroes_everything"] is True and low["rank"] == 64 and low["warnings"]
    high = _run_json(capsys, ["fourier", "filter", "--model", str(planted_folder), "--kind", "high", "--modules",
                              "mlp", "--tau", "10", "--prompts", "40", "--json"])
    assert high["zeroes_everything"] is False and high["rank"] == 18 and not high["warnings"]
    assert high["prompts"] == 40 and 0.0 <= high["accuracy"] <= 1.0 and high["loss"] > 0
    assert sum(high["error_histogram"].values()) + high["error_counts"]["not_a_number"] == \
        high["error_counts"]["wrong"]
    assert high["baseline"]["loss"] != pytest.approx(high["loss"], rel=1e-9)


def test_bad_input_is_one_clear_error(planted_folder, capsys):
    assert main(["fourier", "filter", "--model", str(planted_folder), "--kind", "low", "--modules", "attn",
                 "--template", "{a} plus", "--json"]) == 2
    assert "exactly one {a} and one {b}" in capsys.readouterr().err
    assert main(["fourier", "spectrum", "--model", str(planted_folder), "--numbers", "5000"]) == 2
    assert main(["fourier", "spectrum", "--model", str(planted_folder), "--layer", "7"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_filter_json_carries_the_same_rank_control_deterministically(planted_folder, capsys):
    argv = ["fourier", "filter", "--model", str(planted_folder), "--kind", "high", "--modules", "both", "--tau",
            "10", "--prompts", "40", "--control-seeds", "3", "--json"]
    first, second = _run_json(capsys, argv), _run_json(capsys, argv)
    assert first["control_seeds"] == [0, 1, 2] and len(first["control_accuracies"]) == 3
    assert first["control_accuracies"] == second["control_accuracies"]
    assert first["control_accuracy_mean"] == pytest.approx(np.mean(first["control_accuracies"]))
    clean = first["baseline"]["accuracy"]
    assert first["effect"] == pytest.approx(clean - first["accuracy"])
    assert first["control_effect_mean"] == pytest.approx(clean - first["control_accuracy_mean"])
    if first["control_effect_mean"] > 1 / 40 + 1e-12:
        assert first["specificity"] == pytest.approx(first["effect"] / first["control_effect_mean"])
    else:
        assert "specificity" not in first
    assert f"(rank {first['rank']})" in first["reading"] and first["verdict"] in first["reading"]
    zeroed = _run_json(capsys, ["fourier", "filter", "--model", str(planted_folder), "--kind", "low", "--modules",
                                "both", "--tau", "10", "--prompts", "40", "--control-seeds", "2", "--json"])
    assert zeroed["zeroes_everything"] and "control_accuracy_mean" not in zeroed and "reading" not in zeroed
