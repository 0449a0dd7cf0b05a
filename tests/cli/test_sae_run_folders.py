"""`--sae` takes a run folder holding exactly one SAE (what `sae train --out DIR` writes: DIR/<arch>-<width>-...),
and refuses a folder of several (or none) naming the SAE folders inside; `sae train --arch transcoder
--target-hook OUT` trains a transcoder as `sae sweep` does. On a tiny GPT-2 saved as a local model folder."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from interpscope.cli import main
from interpscope.sae.documents import EvaluationDocument, TrainingReport
from tests.sae_store_tiny import save_tiny_lm

TRAIN = ["--width", "48", "--tokens", "2048", "--cache-tokens", "1024", "--context", "32", "--batch-size", "256",
         "--lr", "3e-3"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interpscope: error: ") and "Traceback" not in err, err
    return lines[0]


def test_train_then_eval_the_run_folder(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    report_file = tmp_path / "report.json"
    code, stdout, err = run(capsys, "sae", "train", "--model", model_dir, "--hook", "blocks.1.hook_resid_post",
                            "--arch", "relu", *TRAIN, "--out", out, "--json", report_file)
    assert code == 0, err
    report = json.loads(report_file.read_text(encoding="utf-8"))  # --json FILE: the report there, a line here
    assert report["schema"] == TrainingReport.SCHEMA and list(report["saved"]) == ["relu-48-l5"]
    assert str(report_file) in stdout and not stdout.lstrip().startswith("{")
    code, stdout, err = run(capsys, "sae", "eval", "--sae", out, "--tokens", "256", "--context", "32", "--json")
    assert code == 0, err
    assert json.loads(stdout)["schema"] == EvaluationDocument.SCHEMA
    assert str(out / "relu-48-l5") in err  # said on stderr which SAE the run folder stands for

    two = tmp_path / "two"
    for name in ("first", "second"):
        shutil.copytree(out / "relu-48-l5", two / name)
    (two / "notes").mkdir()
    for argv in (["sae", "eval", "--sae", two], ["sae", "bench", "--sae", two], ["sae", "steer", "--sae", two,
                 "--feature", "1", "--text", "hi"], ["sae", "feature", "--sae", two, "--id", "1"],
                 ["sae", "circuit", "--upstream", two, "--text", "hi"]):
        code, _, err = run(capsys, *argv)
        line = one_error_line(err)
        assert code == 2 and "2 SAE folders: first, second" in line and "notes" not in line, line
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "sae", "prompt", "--sae", empty, "--text", "hi")
    assert code == 2 and "not an SAE folder" in one_error_line(err) and "holds no SAE folder" in err


def test_train_a_transcoder_with_a_target_hook(model_dir, tmp_path, capsys):
    out = tmp_path / "tc"
    code, stdout, err = run(capsys, "sae", "train", "--model", model_dir, "--hook", "blocks.1.hook_resid_mid",
                            "--target-hook", "blocks.1.hook_mlp_out", "--arch", "transcoder", *TRAIN, "--out", out,
                            "--eval-tokens", "64")
    assert code == 0, err
    report = json.loads(stdout)  # without --json the report is printed, as every `sae train` prints it
    assert report["schema"] == TrainingReport.SCHEMA and list(report["saved"]) == ["transcoder-48-l5"]
    assert report["eval"]["transcoder-48-l5"]["hook_name"] == "blocks.1.hook_resid_mid->blocks.1.hook_mlp_out"
    cfg = json.loads((out / "transcoder-48-l5" / "cfg.json").read_text(encoding="utf-8"))
    assert cfg["architecture"] == "transcoder" and cfg["hook_name"] == "blocks.1.hook_resid_mid"
    assert cfg["hook_name_out"] == "blocks.1.hook_mlp_out"
    code, stdout, err = run(capsys, "sae", "eval", "--sae", out, "--tokens", "256", "--context", "32", "--json")
    assert code == 0, err  # the run folder holds one transcoder: evaluated spliced in place of the MLP
    assert json.loads(stdout)["hook_name"] == "blocks.1.hook_resid_mid->blocks.1.hook_mlp_out"
    code, stdout, err = run(capsys, "sae", "train", "--model", model_dir, "--hook", "blocks.1.hook_resid_mid",
                            "--target-hook", "blocks.1.hook_mlp_out", "--arch", "transcoder", *TRAIN, "--out", out)
    assert code == 0, err  # rerun with the same settings: the finished transcoder is kept
    assert json.loads(stdout)["saved"] == report["saved"]


@pytest.mark.parametrize(("extra", "words"), [
    (["--arch", "transcoder"], ("--target-hook",)),
    (["--arch", "relu", "--target-hook", "blocks.1.hook_mlp_out"], ("--arch transcoder",)),
    (["--arch", "transcoder", "--target-hook", "blocks.1.hook_resid_mid"], ("must differ",)),
])
def test_target_hook_refusals(model_dir, tmp_path, capsys, extra, words):
    out = tmp_path / "never"
    code, _, err = run(capsys, "sae", "train", "--model", model_dir, "--hook", "blocks.1.hook_resid_mid", *TRAIN,
                       "--out", out, *extra)
    line = one_error_line(err)
    assert code == 2 and all(word in line for word in words), line
    assert not out.exists()  # refused before anything was written
