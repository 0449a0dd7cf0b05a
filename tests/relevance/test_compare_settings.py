"""`explain --faithfulness --compare` and the API's compare_faithfulness compute each map with the method settings
asked for (issue 45.20): IG's steps and baseline, occlusion's window; and every curve records them."""
from __future__ import annotations

import json

import numpy as np
import pytest

import interpscope
from interpscope.cli import main

pytestmark = pytest.mark.bundled
TEXT = "Elizabeth Bennet walked slowly to the old"


@pytest.fixture(scope="module")
def folder(tmp_path_factory, bundled_lm):
    from tests.tiny import tiny_llama

    path = tmp_path_factory.mktemp("compare") / "tiny-llama"
    tiny_llama(vocab=len(bundled_lm.tokenizer)).save_pretrained(path)
    bundled_lm.tokenizer.save_pretrained(path)
    return path


def compare(capsys, folder, *flags: str) -> dict:
    capsys.readouterr()
    code = main(["explain", "--faithfulness", "--compare", "--text", TEXT, "--methods", "ig", "occlusion",
                 "--model", str(folder), "--device", "cpu", "--json", "-", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return {curve["method"]: curve for curve in json.loads(captured.out)["curves"]}


def test_compare_uses_the_steps_window_and_baseline_asked_for(capsys, folder):
    few = compare(capsys, folder, "--ig-steps", "2", "--occlusion-window", "1")
    many = compare(capsys, folder, "--ig-steps", "64", "--occlusion-window", "3")
    assert few["ig"]["settings"] == {"baseline": "zero", "ig_steps": 2}
    assert many["ig"]["settings"] == {"baseline": "zero", "ig_steps": 64}
    assert few["occlusion"]["settings"]["occlusion_window"] == 1
    assert many["occlusion"]["settings"]["occlusion_window"] == 3
    assert few["ig"]["morf"] != many["ig"]["morf"]  # before the fix both ran IG's default 32 steps
    assert few["occlusion"]["morf"] != many["occlusion"]["morf"]
    mean = compare(capsys, folder, "--baseline", "mean", "--ig-steps", "8")
    assert mean["ig"]["settings"]["baseline"] == "mean" and mean["ig"]["baseline"] == "mean"


def test_the_api_passes_method_options_and_starts_ig_from_the_deletion_baseline(folder):
    lm = interpscope.load(str(folder), device="cpu")
    comparison = interpscope.compare_faithfulness(lm, TEXT, ["ig", "attnlrp"], baseline="mean", ig_steps=8)
    ig, attnlrp = comparison.curves
    assert ig.settings == {"baseline": "mean", "ig_steps": 8} and attnlrp.settings is None
    assert "settings" not in attnlrp.to_dict()  # a method without options: absent, not empty
    alone = interpscope.explain(lm, TEXT, "ig", baseline="mean", ig_steps=8)
    again = interpscope.faithfulness(lm, alone, baseline="mean")
    assert np.allclose(ig.morf, again.morf) and ig.abpc == pytest.approx(again.abpc)
