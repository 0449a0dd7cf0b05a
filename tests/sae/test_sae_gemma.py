"""Gemma proof for SAEs: a tiny random Gemma 3 (GELU-tanh gated MLP, (1 + w) RMSNorm, scaled embeddings, sliding
and full attention) goes through the same pipeline as every model: activations cached at a hook, a ReLU and a
BatchTopK SAE trained from one buffer with a tiny budget, evaluated (CE with the SAE spliced in) and stored."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from interpscope.capture import capture
from interpscope.corpus import token_chunks
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.sae import load_sae
from interpscope.sae.evaluation import evaluate_sae
from interpscope.sae.pipeline import SAESpec, train_saes
from interpscope.sae.store import FeatureStore, build_store
from tests.tiny import GPT2_VOCAB, tiny_gemma3
from tests.tiny import loaded as wrap_loaded

HOOK = "blocks.1.hook_resid_pre"


@pytest.fixture(scope="module")
def gemma():
    torch.set_num_threads(1)
    lm = wrap_loaded(tiny_gemma3(vocab=GPT2_VOCAB), gpt2_tokenizer(), name="tiny-gemma3")
    assert lm.adapter.family == "gemma"
    return lm


def test_train_evaluate_and_store_saes_on_a_tiny_gemma3(gemma, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    saved = train_saes(gemma, HOOK, [SAESpec("relu", 96, 1.0), SAESpec("batchtopk", 96, k=6)], tmp_path / "run",
                       tokens=256 * 100, cache_tokens=3000, context_size=32, batch_size=256, lr=3e-3,
                       warmup_steps=5, checkpoint_every=0)
    assert set(saved) == {"relu-96-l1", "batchtopk-96-k6"}
    ids = token_chunks(gemma.tokenizer, 32, 512, split="valid")
    x = capture(gemma.adapter, ids, [HOOK]).activations[HOOK][:, 1:].reshape(-1, gemma.adapter.d_model).float()
    for name, folder in saved.items():
        history = json.loads((folder / "history.json").read_text())
        assert history[-1]["recon"] < 0.7 * history[0]["recon"], (name, history[0], history[-1])
        sae = load_sae(folder)
        assert sae.cfg.model_name == "tiny-gemma3" and sae.cfg.hook_name == HOOK
        report = evaluate_sae(gemma, sae, ids=ids)
        summary = report.summary()
        for key in ("l0", "fvu", "loss_recovered", "ce_clean", "ce_sae", "ce_zero", "shrinkage"):
            assert math.isfinite(summary[key]), (name, key)
        assert 0 < report.l0 < 96 and report.fvu < 1.0
        with torch.no_grad():
            direct = float((x - sae(x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
        assert report.sink_tokens == 0  # no massive activation past position 0: the same rows as x
        assert report.fvu == pytest.approx(direct, rel=1e-4)  # the evaluation reads the activations captured here
    store = FeatureStore(build_store(gemma, saved["batchtopk-96-k6"], n_tokens=1024, context_size=32,
                                     batch_size=4))
    assert store.manifest["sae_cfg"]["architecture"] == "batchtopk"
    fired = np.asarray(store.arrays["fire_count"])
    assert fired.sum() > 0
    card = store.card(int(fired.argmax()))
    assert card.top_contexts and card.max_activation > 0
