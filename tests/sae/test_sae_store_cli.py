"""`interpscope sae store / feature / search`, and a store build killed with SIGKILL that resumes identically.

The kill test runs the real command line on the bundled SmolLM2 with a small random SAE at layer 4,
kills the process once a few chunks are on disk, and resumes in-process.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interpscope.cli import main
from interpscope.sae.store import FeatureStore, build_store
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

ROOT = Path(__file__).resolve().parents[2]
CARD_FIELDS = {"id", "density", "max_activation", "top_contexts", "top_logits", "bottom_logits", "histogram",
               "neighbours"}


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-model"))


def test_store_then_feature_json(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    lm = tiny_lm()
    sae = random_sae_folder(lm, tmp_path / "sae")
    assert main(["sae", "store", "--sae", str(sae), "--model", str(tiny_model_dir), "--tokens", "1024",
                 "--context", "64", "--batch-size", "4", "--eval-tokens", "256"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tokens"] == 1024 and report["features"] == 48 and report["bytes"] > 0
    assert report["schema"] == "interpscope.store_build" and report["kind"] == "sae_feature_store"
    assert Path(report["store"]).is_relative_to(tmp_path / "data")
    manifest = json.loads((Path(report["store"]) / "manifest.json").read_text())
    assert 0 < manifest["metrics"]["l0"] < 48 and manifest["metrics"]["n_tokens"] > 0

    assert main(["sae", "feature", "--sae", str(sae), "--id", "4", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert CARD_FIELDS <= set(card)
    assert card["id"] == 4
    expected = FeatureStore(report["store"]).card(4)
    assert card["density"] == pytest.approx(expected.density)
    assert len(card["top_contexts"]) == len(expected.top_contexts) > 0
    for context in card["top_contexts"]:
        assert set(context) >= {"tokens", "activations", "max"}
        assert len(context["tokens"]) == len(context["activations"])
    assert [c["max"] for c in card["top_contexts"]] == sorted((c["max"] for c in card["top_contexts"]), reverse=True)
    assert all(isinstance(r["token"], str) and isinstance(r["weight"], float) for r in card["top_logits"])
    assert isinstance(card["label"], str) and card["label"]
    assert len(card["histogram"]["edges"]) == len(card["histogram"]["counts"]) + 1
    assert sum(card["histogram"]["counts"]) == expected.fire_count
    assert all(isinstance(n["feature"], int) and -1 <= n["cosine"] <= 1 for n in card["neighbours"])

    assert main(["sae", "feature", "--store", report["store"], "--id", "4"]) == 0
    assert "feature 4: density" in capsys.readouterr().out
    assert main(["sae", "search", "--store", report["store"], "--kind", "id", "4"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["schema"] == "interpscope.sae.search" and found["results"][0]["feature"] == 4
    assert found["total"] == 1 and "reason" not in found  # something matched: no reason, absent not null
    from interpscope.sae.store.documents import FeatureSearch
    from interpscope.sae.store.search import search

    store = FeatureStore(report["store"])  # the feature browser's export builds the same document
    page = FeatureSearch(store=store.name, query="4", kind="id", results=search(store, "4", "id"), total=1)
    assert found == page.to_dict()


@pytest.mark.parametrize("args, message", [
    (["--store", "/nonexistent/store", "--id", "1"], "not a complete feature store"),
    (["--sae", "/nonexistent/sae", "--id", "1"], "No feature store"),
])
def test_feature_errors_are_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path))
    assert main(["sae", "feature", *args, "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_feature_id_out_of_range(tmp_path, capsys):
    lm = tiny_lm()
    store = build_store(lm, random_sae_folder(lm, tmp_path / "sae"), tmp_path / "store", n_tokens=512,
                        context_size=64)
    assert main(["sae", "feature", "--store", str(store), "--id", "48", "--json"]) == 2
    assert "0 to 47" in capsys.readouterr().err


def test_killed_build_resumes_identically(bundled_lm, tmp_path):
    sae = random_sae_folder(bundled_lm, tmp_path / "sae", d_sae=64, hook="blocks.4.hook_resid_post")
    options = ["--tokens", "1536", "--context", "128", "--batch-size", "1", "--eval-tokens", "0"]
    out = tmp_path / "killed"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "interpscope.cli", "sae", "store", "--sae", str(sae),
                                "--model", "smollm2-135m", "--out", str(out), *options], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / "killed.partial"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(partial.glob("chunk_*.npz"))) < 2:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = len(list(partial.glob("chunk_*.npz")))
    assert 2 <= done < 12 and not out.exists()

    kwargs = dict(n_tokens=1536, context_size=128, batch_size=1)
    resumed = build_store(bundled_lm, sae, out, **kwargs)
    reference = build_store(bundled_lm, sae, tmp_path / "reference", **kwargs)
    files = sorted(p.name for p in reference.iterdir())
    assert files == sorted(p.name for p in resumed.iterdir())
    for name in files:
        if name not in ("manifest.json", ".interpscope-output.json"):  # the marker has a random id of its own
            assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    assert FeatureStore(resumed).card(0).top_contexts == FeatureStore(reference).card(0).top_contexts
