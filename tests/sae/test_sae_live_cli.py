"""`interpscope sae steer` and `interpscope sae prompt` print what the SAE pages' live views compute, as JSON, and
one-line errors with exit status 2."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from interpscope.cli import main
from interpscope.sae import load_sae
from interpscope.sae.store.prompt import prompt_features
from interpscope.sae.store.steering import steer
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    lm = tiny_lm()
    return save_tiny_lm(root / "model"), random_sae_folder(lm, root / "sae"), lm


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_steer_json_equals_the_backend(setting, capsys):
    model_dir, sae_dir, lm = setting
    sae = load_sae(sae_dir)
    feature = prompt_features(lm, sae, TEXT).top_features[0]
    for mode in ("add", "ablate"):
        out = _json(capsys, ["sae", "steer", "--sae", str(sae_dir), "--model", str(model_dir), "--text", TEXT,
                             "--feature", str(feature), "--mode", mode, "--strength", "40", "--tokens", "6", "--json"])
        direct = steer(lm, sae, TEXT, feature, mode, strength=40.0, n_new=6)
        assert out["mode"] == mode and out["feature"] == feature
        assert out["edited_continuation"] == direct.edited_continuation
        assert out["clean_continuation"] == direct.clean_continuation
        # the command loads the saved model with eager attention, the fixture runs SDPA: equal to float rounding
        assert out["kl"] == pytest.approx(direct.kl, rel=1e-4, abs=1e-9)
        np.testing.assert_allclose(out["logprob_change"], direct.logprob_change, atol=1e-5)
        assert [t["id"] for t in out["edited_top"]] == [t["id"] for t in direct.edited_top]


def test_prompt_json_names_top_features_active_features_and_sinks(setting, capsys):
    model_dir, sae_dir, lm = setting
    out = _json(capsys, ["sae", "prompt", "--sae", str(sae_dir), "--model", str(model_dir), "--text", TEXT,
                         "--top", "5", "--per-token", "3", "--json"])
    view = prompt_features(lm, load_sae(sae_dir), TEXT, n_top=5)
    assert [row["feature"] for row in out["top_features"]] == view.top_features
    assert out["tokens"] == view.tokens and out["excluded_positions"][0] == 0
    expected = view.active_at(4, 3)
    assert [f["feature"] for f in out["per_token"][4]["features"]] == [f["feature"] for f in expected]
    np.testing.assert_allclose([f["activation"] for f in out["per_token"][4]["features"]],
                               [f["activation"] for f in expected], rtol=1e-5)
    assert all(len(row["features"]) <= 3 for row in out["per_token"])
    assert out["per_token"][0]["excluded"] is True
    # the tokenizer adds no BOS: it is prepended, excluded and named; the first word is read like any other
    assert out["bos_prepended"] is True and out["sinks"][0]["prepended"] is True
    assert out["per_token"][0]["excluded_reason"].startswith("prepended BOS")
    assert out["per_token"][1]["excluded"] is False and "excluded_reason" not in out["per_token"][1]
    plain = _json(capsys, ["sae", "prompt", "--sae", str(sae_dir), "--model", str(model_dir), "--text", TEXT,
                           "--top", "5", "--per-token", "3", "--json", "--no-prepend-bos"])
    alone = prompt_features(lm, load_sae(sae_dir), TEXT, n_top=5, prepend_bos=False)
    assert plain["bos_prepended"] is False and plain["tokens"] == alone.tokens == out["tokens"][1:]
    assert plain["excluded_positions"] == alone.excluded_positions == []  # nothing measured, nothing by rule
    assert [row["feature"] for row in plain["top_features"]] == alone.top_features


def test_errors_are_one_line_with_status_2(setting, capsys):
    model_dir, sae_dir, _ = setting
    base = ["sae", "steer", "--sae", str(sae_dir), "--model", str(model_dir), "--text", TEXT]
    for argv in (base + ["--feature", "99999"], base + ["--feature", "1", "--tokens", "500"],
                 ["sae", "prompt", "--sae", str(sae_dir), "--model", str(model_dir)],
                 ["sae", "prompt", "--sae", str(Path(sae_dir) / "missing"), "--text", TEXT]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("interpscope: error:") and err.count("\n") == 1
