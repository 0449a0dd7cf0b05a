"""`interpscope sae train` and `interpscope sae eval --json` on a tiny GPT-2 saved as a local model folder."""
from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest

from interpscope.cli import main
from tests.sae_store_tiny import save_tiny_lm

EVAL_KEYS = ("l0", "fvu", "explained_variance", "mse", "loss_recovered", "ce_clean", "ce_sae", "ce_zero",
             "shrinkage", "dead_fraction", "dense_fraction")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))


def test_train_two_architectures_then_eval_json(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "saes"
    assert main(["sae", "train", "--model", str(tiny_model_dir), "--hook", "blocks.1.hook_resid_post",
                 "--arch", "relu,gated", "--l1", "1,1", "--width", "96", "--tokens", "8192",
                 "--cache-tokens", "3000", "--context", "32", "--batch-size", "256", "--lr", "3e-3",
                 "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["saved"]) == {"relu-96-l1", "gated-96-l1"}
    from interpscope.sae.documents import training_report

    assert report["schema"] == "interpscope.sae.training" and report["hook"] == "blocks.1.hook_resid_post"
    assert "eval" not in report  # no evaluation asked for: absent, not empty
    assert report == training_report(report["model"], report["hook"], report["saved"]).to_dict()
    assert report["histories"]["gated-96-l1"][-1]["tokens"] == 8192
    folder = report["saved"]["gated-96-l1"]
    assert (Path(folder) / "cfg.json").is_file() and (Path(folder) / "sae_weights.safetensors").is_file()
    cfg = json.loads((Path(folder) / "cfg.json").read_text())
    assert cfg["architecture"] == "gated" and cfg["d_sae"] == 96 and cfg["training_tokens"] == 8192
    assert cfg["model_name"] == str(tiny_model_dir)

    assert main(["sae", "eval", "--sae", folder, "--tokens", "512", "--context", "32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in EVAL_KEYS:
        assert isinstance(result[key], float) and math.isfinite(result[key]), key
    assert result["hook_name"] == "blocks.1.hook_resid_post" and result["n_tokens"] == 16 * 31
    assert result["loss_recovered"] == pytest.approx(
        (result["ce_zero"] - result["ce_sae"]) / (result["ce_zero"] - result["ce_clean"]))
    hist = result["log10_density_histogram"]
    assert len(hist["edges"]) == len(hist["counts"]) + 1


def test_eval_errors_are_one_line(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "sae.pt"
    bad.write_bytes(pickle.dumps({"W_enc": 1}))
    assert main(["sae", "eval", "--sae", str(bad), "--model", str(tiny_model_dir), "--json"]) == 2
    assert "pickle" in capsys.readouterr().err
    assert main(["sae", "train", "--model", str(tiny_model_dir), "--hook", "blocks.1.hook_resid_post",
                 "--arch", "topk", "--tokens", "1024", "--batch-size", "256", "--out", str(tmp_path / "o")]) == 2
    assert "needs --k" in capsys.readouterr().err
    assert main(["sae", "train", "--model", str(tiny_model_dir), "--hook", "blocks.1.hook_resid_post",
                 "--arch", "relu,gated", "--l1", "1,2,3", "--out", str(tmp_path / "o")]) == 2
    assert "one per architecture" in capsys.readouterr().err
