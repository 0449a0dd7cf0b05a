"""The interpscope command line: JSON output, and a one-line error with a non-zero exit on bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpscope.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "interpscope.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_models_json():
    result = run_cli("models", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "interpscope.models" and document["schema_version"] == 1
    models = document["models"]
    assert any(m.items() >= {"name": "smollm2-135m", "family": "llama", "source": "bundled"}.items() for m in models)
    assert all({"name", "family", "source", "modality"} <= set(m) <= {"name", "family", "source", "description",
                                                                  "modality"} for m in models)
    assert {m["modality"] for m in models} <= {"text", "image"}


def test_predict_json(bundled_lm):
    result = run_cli("predict", "--text", "The capital of France is", "--top", "5", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == "smollm2-135m"
    assert data["tokens"][1:] == ["The", " capital", " of", " France", " is"] and data["bos_prepended"] is True
    assert data["predictions"][0]["token"] == " Paris"
    probs = [p["prob"] for p in data["predictions"]]
    assert len(probs) == 5 and probs == sorted(probs, reverse=True)
    assert all(isinstance(p["id"], int) and isinstance(p["logit"], float) for p in data["predictions"])
    assert data["schema"] == "interpscope.prediction" and data["text"] == "The capital of France is"


def test_predict_from_file(tmp_path, bundled_lm, capsys):
    """In this process (main(), as the console entry point calls it; the entry point itself is tested above and
    below): a child process would import torch and load SmolLM2 again."""
    path = tmp_path / "prompt.txt"
    path.write_text("The capital of France is", encoding="utf-8")
    capsys.readouterr()
    code = main(["predict", "--file", str(path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["predictions"][0]["token"] == " Paris"


@pytest.mark.parametrize("args, message", [
    (("predict", "--text", "   "), "empty"),
    (("predict", "--text", "hi", "--top", "0"), "--top: must be positive"),
    (("predict", "--model", "no-such-org/no-such-model", "--text", "hi"), "not available offline"),
    (("predict", "--model", "/no/such/folder", "--text", "hi"), "No model folder"),
    (("predict", "--text", "hi", "--device", "tpu"), "Unknown device"),
    (("predict", "--file", "/no/such/file.txt"), "No such file"),
])
def test_bad_input_exits_nonzero_with_one_line(args, message, capsys):
    """main() in this process (each case in a child process took 5-35 s, mostly importing torch); the exit status
    of a real process is tested by the binary-file and no-subcommand cases below."""
    capsys.readouterr()
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("interpscope: error:")]
    assert len(lines) == 1 and message in lines[0], err


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "blob.txt"
    path.write_bytes(bytes(range(256)) * 4)
    result = run_cli("predict", "--file", str(path))
    assert result.returncode == 2 and "binary" in result.stderr


def test_missing_subcommand_is_a_usage_error():
    result = run_cli()
    assert result.returncode != 0 and "usage" in result.stderr


@pytest.mark.parametrize("args, command, extra", [
    (("heads", "--text", "hi", "--layer", "9"), "heads", "--layer 9"),
    (("sae", "search", "--store", "s", "--query", "x"), "sae search", "--query"),  # x is its positional query
    (("neurons", "ablate", "--neurons", "1.1", "--bogus"), "neurons ablate", "--bogus"),
    (("models", "--bogus"), "models", "--bogus"),
])
def test_an_unknown_option_names_the_subcommand_and_its_help(args, command, extra, capsys):
    """argparse reports options it does not know from the top-level parser ('see interpscope --help'); the user
    typed them to a subcommand, so its name and its own --help are what the line gives."""
    capsys.readouterr()
    assert main(list(args)) == 2
    expected = f"{command}: unrecognized arguments: {extra} (usage: `interpscope {command} --help`)"
    assert capsys.readouterr().err.strip() == f"interpscope: error: {expected}"
