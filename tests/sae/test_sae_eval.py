"""Evaluation on a tiny GPT-2: an exact SAE (x = ReLU(x) - ReLU(-x)) splices in for free; the shared-pass
evaluation of several SAEs equals evaluating each alone; density and dead/dense fractions count what fired."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.sae import SAEConfig, build_sae
from interpscope.sae.evaluation import evaluate_sae, evaluate_saes, text_windows
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
    assert result.ce_increase == pytest.approx(result.ce_sae - result.ce_clean, abs=1e-15)
    assert abs(result.ce_increase) < 1e-4
    assert result.cosine == pytest.approx(1.0, abs=1e-6)
    assert result.n_tokens == 16 * 31


def test_shared_evaluation_matches_single(lm):
    d = lm.adapter.d_model
    saes = [build_sae(SAEConfig(d_in=d, d_sae=24, architecture=a, hook_name=HOOK, k=4), seed=s)
            for s, a in enumerate(["relu", "topk"])]
    with torch.no_grad():
        saes[0].b_enc.fill_(-0.05)
    together = evaluate_saes(lm, saes, n_tokens=256, context_size=32)
    for sae, shared in zip(saes, together, strict=True):
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


def _three_pass_reference(lm, sae, ids):
    """Clean, zero-ablated and spliced CE and the KL, each pass running the whole model (what evaluation did before
    its spliced passes started after the hook's block)."""
    from interpscope.capture import hooks
    from interpscope.sae.sinks import sink_rows

    def run(edit=None):
        with torch.no_grad(), hooks(lm.adapter, {HOOK: edit} if edit else {}):
            return torch.log_softmax(lm.model(input_ids=ids).logits[:, 1:-1].double(), -1)

    seen = {}
    clean = run(lambda t: seen.setdefault("x", t.detach().clone()) is None or None)
    x = seen["x"][:, 1:]
    sinks = sink_rows(x)
    zero = run(lambda t: torch.cat([t[:, :1], torch.where(sinks[..., None], x, 0.0)], 1))
    x_hat = sae.decode(sae.encode(x)).detach()
    spliced = run(lambda t: torch.cat([t[:, :1], torch.where(sinks[..., None], x, x_hat)], 1))
    target = ids[:, 2:, None]
    ce = {name: float(-lp.gather(-1, target).mean()) for name, lp in
          (("clean", clean), ("zero", zero), ("sae", spliced))}
    return ce, float((clean.exp() * (clean - spliced)).sum(-1).mean())


def test_spliced_passes_from_the_hook_equal_three_full_passes(lm):
    from interpscope.sae.evaluation import resume_block

    assert resume_block(lm.adapter, HOOK) == 0 and resume_block(lm.adapter, "blocks.1.hook_resid_pre") == 0
    assert resume_block(lm.adapter, "blocks.0.hook_resid_pre") is None
    d = lm.adapter.d_model
    sae = build_sae(SAEConfig(d_in=d, d_sae=24, architecture="relu", hook_name=HOOK), seed=5)
    with torch.no_grad():
        sae.b_enc.fill_(-0.05)
    ids = text_windows(lm.tokenizer, "It is a truth universally acknowledged, that a single man in possession of "
                       "a good fortune, must be in want of a wife. " * 12, context_size=32)
    result = evaluate_sae(lm, sae, ids=ids)
    ce, kl = _three_pass_reference(lm, sae, ids)
    assert result.ce_clean == pytest.approx(ce["clean"], rel=1e-9)
    assert result.ce_zero == pytest.approx(ce["zero"], rel=1e-9) and abs(ce["zero"] - ce["clean"]) > 1e-4
    assert result.ce_sae == pytest.approx(ce["sae"], rel=1e-9) and abs(ce["sae"] - ce["clean"]) > 1e-4
    assert result.kl == pytest.approx(kl, rel=1e-9) and kl > 1e-4
    # the CE increase over the clean model, beside loss recovered and the zero-ablation loss it is relative to
    assert result.ce_increase == pytest.approx(ce["sae"] - ce["clean"], rel=1e-9, abs=1e-12)
    assert result.ce_increase > 1e-4
    summary = result.summary()
    assert summary["ce_increase"] == result.ce_increase and summary["ce_zero"] == pytest.approx(ce["zero"])
    sentence = result.loss_sentence()
    assert f"{result.ce_zero:.3f}" in sentence and f"{result.ce_increase:+.3f}" in sentence
