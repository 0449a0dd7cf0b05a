"""Evaluation on a tiny GPT-2: an exact SAE (x = ReLU(x) - ReLU(-x)) splices in for free; the shared-pass
evaluation of several SAEs equals evaluating each alone; density and dead/dense fractions count what fired."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.sae import SAEConfig, build_sae
from backend.sae.evaluation import evaluate_sae, evaluate_saes, text_windows
from tests.sae_store_tiny import HOOK, tiny_lm


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def _exact_sae(d: int):
    sae = build_sae(SAEConfig(d_in=d, d_sae=2 * d, architecture="relu", hook_name=HOOK))
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], 1))
        sae.W_dec.copy_(torch.cat([eye, -eye], 0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


def test_exact_sae_recovers_all_the_loss(lm):
    result = evaluate_sae(lm, _exact_sae(lm.adapter.d_model), n_tokens=512, context_size=32)
    assert result.fvu == pytest.approx(0.0, abs=1e-9) and result.shrinkage == pytest.approx(1.0, abs=1e-6)
    assert result.ce_sae == pytest.approx(result.ce_clean, abs=1e-4)
    assert result.kl == pytest.approx(0.0, abs=1e-6)
    assert result.ce_zero != pytest.approx(result.ce_clean, abs=1e-3)
    assert result.loss_recovered == pytest.approx(1.0, abs=1e-3)
    assert result.cosine == pytest.approx(1.0, abs=1e-6)
    assert result.n_tokens == 16 * 31


def test_shared_evaluation_matches_single(lm):
    d = lm.adapter.d_model
    saes = [build_sae(SAEConfig(d_in=d, d_sae=24, architecture=a, hook_name=HOOK, k=4), seed=s)
            for s, a in enumerate(["relu", "topk"])]
    with torch.no_grad():
        saes[0].b_enc.fill_(-0.05)
    together = evaluate_saes(lm, saes, n_tokens=256, context_size=32)
    for sae, shared in zip(saes, together):
        alone = evaluate_sae(lm, sae, n_tokens=256, context_size=32)
        for key, value in alone.summary().items():
            if isinstance(value, float):
                assert shared.summary()[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key
        assert np.array_equal(shared.density, alone.density)
    topk = together[1]
    assert topk.l0 <= 4 and np.isclose(topk.density.sum(), topk.l0)
    assert topk.dead_fraction == pytest.approx(float((topk.density == 0).mean()))
    assert topk.dense_fraction == pytest.approx(float((topk.density > 0.1).mean()))


def test_text_windows(lm):
    short = text_windows(lm.tokenizer, "A short sentence of a few words.", context_size=128)
    assert short.shape[0] == 1 and 3 <= short.shape[1] < 128
    long = text_windows(lm.tokenizer, "word " * 300, context_size=64)
    assert long.shape[1] == 64 and long.shape[0] >= 4
