"""Massive activations (attention sinks past position 0) are treated like position 0 wherever an SAE reads activations.

A tiny GPT-2 whose embedding of one token is scaled up ~1000x plays SmolLM2's extra sinks: that token's residual
stream is then hundreds of times the median norm. Evaluation must leave those rows untouched and out of the
reconstruction averages (FVU checked against a hand computation), the feature store must never rank them, and the
prompt view must say where they are.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import capture
from interpscope.corpus import token_chunks
from interpscope.sae import load_sae
from interpscope.sae.evaluation import evaluate_sae
from interpscope.sae.sinks import sink_rows
from interpscope.sae.store import FeatureStore, build_store
from interpscope.sae.store.prompt import prompt_features
from tests.sae_store_tiny import HOOK, random_sae_folder, tiny_lm

CONTEXT, N_TOKENS = 64, 2048


@pytest.fixture(scope="module")
def sink_lm():
    """(tiny LM with a massive-activation token, that token's id)."""
    lm = tiny_lm()
    token = lm.tokenizer.encode(" the")[0]
    with torch.no_grad():
        lm.model.transformer.wte.weight[token] *= 1000.0
    return lm, token


def test_sink_rows_flags_only_rows_far_above_the_median():
    x = torch.randn(200, 16)
    x[17] *= 50.0
    x[90] *= 3.0
    assert torch.nonzero(sink_rows(x)).flatten().tolist() == [17]
    assert sink_rows(x, factor=2.0)[90] and not sink_rows(x, factor=200.0).any()
    assert sink_rows(torch.randn(4, 7, 16)).shape == (4, 7)
    assert sink_rows(torch.zeros(0, 16)).shape == (0,)


def test_the_planted_token_is_a_sink(sink_lm):
    lm, token = sink_lm
    ids = token_chunks(lm.tokenizer, CONTEXT, N_TOKENS)
    x = capture(lm.adapter, ids, [HOOK]).activations[HOOK][:, 1:]
    norms = x.norm(dim=-1)
    is_token = ids[:, 1:] == token
    assert is_token.sum() > 10
    assert norms[is_token].min() > 100 * norms[~is_token].median()
    assert torch.equal(sink_rows(x), is_token)


def test_evaluation_leaves_sinks_out_of_the_reconstruction_figures(sink_lm, tmp_path):
    lm, token = sink_lm
    sae = load_sae(random_sae_folder(lm, tmp_path / "sae"))
    ids = token_chunks(lm.tokenizer, CONTEXT, N_TOKENS, split="test")
    result = evaluate_sae(lm, sae, ids=ids)
    is_token = ids[:, 1:] == token
    assert result.sink_tokens == int(is_token.sum()) > 0
    assert result.n_tokens == is_token.numel() - result.sink_tokens

    x = capture(lm.adapter, ids, [HOOK]).activations[HOOK][:, 1:].reshape(-1, lm.adapter.d_model).double()
    keep = ~is_token.reshape(-1)
    with torch.no_grad():
        x_hat = sae(x.float()).double()
    typical = x[keep]
    fvu = float((typical - x_hat[keep]).pow(2).sum() / (typical - typical.mean(0)).pow(2).sum())
    assert result.fvu == pytest.approx(fvu, rel=1e-4)
    mse = float((typical - x_hat[keep]).pow(2).mean())
    assert result.mse == pytest.approx(mse, rel=1e-4)
    assert float((x - x_hat).pow(2).mean()) > 100 * mse  # with the sinks in, MSE would be theirs alone
    assert np.isfinite(result.loss_recovered) and np.isfinite(result.shrinkage)


def test_store_and_prompt_view_never_rank_a_sink(sink_lm, tmp_path):
    lm, token = sink_lm
    folder = random_sae_folder(lm, tmp_path / "sae")
    store = FeatureStore(build_store(lm, folder, tmp_path / "store", n_tokens=N_TOKENS, context_size=CONTEXT,
                                     batch_size=4))
    ids = token_chunks(lm.tokenizer, CONTEXT, N_TOKENS)
    sae = load_sae(folder)
    with torch.no_grad():
        acts = sae.encode(capture(lm.adapter, ids, [HOOK]).activations[HOOK].float()).numpy()
    acts[:, 0] = 0
    sinks = (ids == token).numpy()
    sinks[:, 0] = False
    assert (acts[sinks] > 0).any()  # unhandled, the SAE would report features at the sinks
    acts[sinks] = 0
    np.testing.assert_array_equal(store.arrays["fire_count"], (acts.reshape(-1, acts.shape[-1]) > 0).sum(0))
    for name in ("top_loc", "int_loc"):  # (sequence, position) of every top context and interval sample
        loc = np.asarray(store.arrays[name]).reshape(-1, 2)
        loc = loc[loc[:, 0] >= 0]
        assert len(loc) and not (ids.numpy()[loc[:, 0], loc[:, 1]] == token).any(), name

    text = "It is a truth universally acknowledged, that the single man in possession of the fortune"
    result = prompt_features(lm, sae, text, prepend_bos=False)
    where = [i for i, t in enumerate(lm.encode(text)[0].tolist()) if t == token and i > 0]
    assert result.sink_positions == where and len(where) == 2
    assert result.excluded_positions == where  # measured, never assumed: the first word is not excluded by rule
    assert not result.activations[where].any()
    assert all(result.reasons()[i].startswith("measured attention sink, ") for i in where)
    shifted = prompt_features(lm, sae, text)  # the default prepends the BOS: every position moves by one
    assert shifted.sink_positions == [i + 1 for i in where]
    assert shifted.excluded_positions == [0] + [i + 1 for i in where]
    assert shifted.reasons()[0].startswith("prepended BOS")
