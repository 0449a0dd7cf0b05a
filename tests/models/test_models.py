"""Model loading: the bundled SmolLM2 (conversion, cache, prediction), local folders, offline messages."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from interpscope.config import InterpscopeError, resolve_device, resolve_dtype
from interpscope.models import load_model
from interpscope.models.loading import available_models
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.predict import predict_next
from tests.tiny import tiny_gpt2

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_model_predicts_paris(bundled_lm):
    result = predict_next(bundled_lm, "The capital of France is", top=10)
    assert result.predictions[0].token == " Paris"
    probs = [p.prob for p in result.predictions]
    assert probs == sorted(probs, reverse=True) and 0.3 < probs[0] <= 1.0
    assert result.tokens[1:] == ["The", " capital", " of", " France", " is"]  # after the model's prefix token
    assert result.bos_prepended and result.token_ids[0] == bundled_lm.prefix_token_id
    assert bundled_lm.family == "llama" and bundled_lm.adapter.n_layers == 30


def test_one_copy_per_model_device_dtype(bundled_lm):
    # (not `is bundled_lm`: the session's copy may have been evicted by the memory budget since the fixture loaded it,
    # when later tests loaded bigger models; the claim is one copy per key while it is cached)
    first = load_model("smollm2-135m", device="cpu", dtype="float32")
    assert load_model("smollm2-135m", device="cpu", dtype="float32") is first
    assert load_model("smollm2-135m", device="cpu", dtype="bfloat16") is not first


CONVERT = "from interpscope.models import smollm2; import sys; sys.stdout.write(str(smollm2.convert()))"


def test_bundled_conversion_is_once_and_safe_under_concurrency(tmp_path):
    """Two processes converting into one empty data dir at once: both succeed, one folder, later loads reuse it."""
    env = dict(os.environ, INTERPSCOPE_DATA_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outputs]
    folder = Path(outputs[0][0])
    assert Path(outputs[1][0]) == folder
    assert sorted(p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")) == [folder.name]
    weights = folder / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    start = time.perf_counter()
    again = subprocess.run([sys.executable, "-c", CONVERT], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and Path(again.stdout) == folder
    assert weights.stat().st_mtime_ns == stamp  # not converted again
    assert time.perf_counter() - start < 30
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as handle:
        assert "model.embed_tokens.weight" in handle.keys()
        assert tuple(handle.get_slice("model.embed_tokens.weight").get_shape()) == (49152, 576)


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tiny_gpt2().save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return folder


def test_local_folder_loads(gpt2_folder):
    lm = load_model(str(gpt2_folder), device="cpu")
    assert lm.family == "gpt2" and lm.source == "local"
    assert lm.card()["layers"] == 2
    result = predict_next(lm, "Hello world", top=3)  # GPT-2's BOS (<|endoftext|>) first, as every view runs it
    assert len(result.predictions) == 3 and result.tokens == ["<|endoftext|>", "Hello", " world"]
    assert predict_next(lm, "Hello world", top=3, prepend_bos=False).tokens == ["Hello", " world"]


def test_float64_copy_is_separate(gpt2_folder):
    lm32 = load_model(str(gpt2_folder), device="cpu", dtype="float32")
    lm64 = load_model(str(gpt2_folder), device="cpu", dtype="float64")
    assert lm32 is not lm64 and next(lm64.model.parameters()).dtype == torch.float64


def test_folder_without_config_is_explained(tmp_path):
    with pytest.raises(InterpscopeError, match="no config.json"):
        load_model(str(tmp_path))


def test_unsupported_family_is_explained(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "vocab_size": 10, "hidden_size": 8}')
    with pytest.raises(InterpscopeError, match="Unsupported model type 'bert'"):
        load_model(str(tmp_path))


def test_hub_model_not_available_offline_is_explained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from interpscope.models import loading

    loading.hub_reachable.cache_clear()
    with pytest.raises(InterpscopeError, match="not available offline"):
        load_model("no-such-org/no-such-model-xyz")
    loading.hub_reachable.cache_clear()


def test_empty_model_name_is_refused():
    with pytest.raises(InterpscopeError, match="No model name"):
        load_model("  ")


def test_text_longer_than_the_cap_is_refused(gpt2_folder):
    lm = load_model(str(gpt2_folder), device="cpu")
    with pytest.raises(InterpscopeError, match="tokens long"):
        lm.encode("word " * 200)  # tiny model context is 128


def test_devices_and_dtypes():
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    assert resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(InterpscopeError, match="no CUDA"):
            resolve_device("cuda")
    with pytest.raises(InterpscopeError, match="Unknown device"):
        resolve_device("tpu")
    assert resolve_dtype("bfloat16") is torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    with pytest.raises(InterpscopeError, match="Unknown dtype"):
        resolve_dtype("float8")


def test_available_models_lists_the_bundled_default():
    models = available_models()
    assert models[0]["name"] == "smollm2-135m" and models[0]["family"] == "llama"
    assert all(m["source"] in ("bundled", "huggingface-cache") for m in models)
