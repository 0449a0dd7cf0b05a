"""docs/methods/entropy-neurons.md checks on synthetic weights: rho, LogitVar, the unigram direction and cosine."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.capture import capture
from interpscope.entropy_neurons.folding import final_norm, folded_unembedding, folded_W_out, logits_from_residual
from interpscope.entropy_neurons.metrics import entropy_of
from interpscope.entropy_neurons.unigram import unigram_direction, unigram_log_probs
from interpscope.entropy_neurons.weights import default_k, neuron_stats
from tests.tiny import neuron_model, plant_entropy_neuron

FAMILIES = ["gpt2", "llama", "gpt_neox"]


def _randomise_gamma(model) -> None:
    """A non-trivial final-norm gain, so the tests see whether gamma is folded into W_U."""
    weight = get_adapter(model).final_norm().weight
    with torch.no_grad():
        weight.copy_(torch.rand(weight.shape[0], dtype=weight.dtype) * 1.5 + 0.25)


@pytest.mark.parametrize("family", FAMILIES)
def test_null_space_neuron_has_rho_one_and_tiny_logit_var(family):
    model = neuron_model(family, vocab_size=200, d_model=32, d_mlp=64)
    _randomise_gamma(model)
    plant_entropy_neuron(model, layer=1, index=7, k=5, norm=25.0)
    stats = neuron_stats(get_adapter(model), layer=1, k=5)
    assert stats.rho[7] == pytest.approx(1.0, abs=1e-9)
    assert stats.logit_var[7] < 1e-10
    others = np.delete(stats.rho, 7)
    assert 0.2 < np.median(others) < 0.6  # a random direction: about sqrt(k / d) = 0.4
    assert np.median(np.delete(stats.logit_var, 7)) > 1e-3
    assert stats.ranking()[0] == 7
    assert stats.norm[7] == pytest.approx(25.0, rel=1e-9)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_rho_and_logit_var_match_a_direct_svd(family):
    """The Gram/eigh shortcut against numpy's SVD and an explicit variance over the vocabulary."""
    model = neuron_model(family, vocab_size=200, d_model=32, d_mlp=64, seed=3)
    _randomise_gamma(model)
    adapter = get_adapter(model)
    k = 4
    stats = neuron_stats(adapter, layer=0, k=k)
    W_U = adapter.W_U().detach().numpy() * final_norm(adapter).gamma.numpy()[:, None]
    W_out = adapter.W_out(0).detach().numpy()
    if family == "gpt2":  # LayerNorm: centre residual writes; the all-ones direction is not a candidate
        W_U = W_U - W_U.mean(0, keepdims=True)
        W_out = W_out - W_out.mean(1, keepdims=True)
    W_U = W_U - W_U.mean(1, keepdims=True)
    U, S, _ = np.linalg.svd(W_U, full_matrices=False)
    bottom = U[:, S > 1e-9 * S[0]][:, -k:]
    unit = W_out / np.linalg.norm(W_out, axis=1, keepdims=True)
    np.testing.assert_allclose(stats.rho, np.linalg.norm(unit @ bottom, axis=1), atol=1e-8)
    unit_cols = W_U / np.linalg.norm(W_U, axis=0, keepdims=True)
    np.testing.assert_allclose(stats.logit_var, (unit @ unit_cols).var(axis=1), rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(stats.norm, np.linalg.norm(W_out, axis=1), rtol=1e-12)


def test_default_k_is_about_one_percent():
    assert default_k(768) == 8 and default_k(4096) == 41 and default_k(576) == 6 and default_k(32) == 1


def test_folded_unembedding_reproduces_the_model_logits_up_to_a_shift():
    """Folding gamma (and centring) must not change what softmax sees."""
    model = neuron_model("gpt2", vocab_size=200, seed=5)
    _randomise_gamma(model)
    adapter = get_adapter(model)
    tokens = torch.randint(0, 200, (1, 20))
    run = capture(adapter, tokens, [f"blocks.{adapter.n_layers - 1}.hook_resid_post"])
    resid = run.activations[f"blocks.{adapter.n_layers - 1}.hook_resid_post"]
    norm = final_norm(adapter)
    normalised = (resid - resid.mean(-1, keepdim=True)) / norm.scale(resid)[:, None]
    folded_logits = normalised @ folded_unembedding(adapter)
    expected = run.logits - run.logits.mean(-1, keepdim=True)
    torch.testing.assert_close(folded_logits - folded_logits.mean(-1, keepdim=True), expected, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(logits_from_residual(adapter, resid), run.logits, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_entropy_rises_monotonically_with_alpha_along_the_null_direction(family):
    """Adding alpha * w_null to the final residual (orthogonal to it) only grows its norm -> flatter softmax."""
    model = neuron_model(family, vocab_size=200, seed=2)
    adapter = get_adapter(model)
    directions = plant_entropy_neuron(model, layer=1, index=0, k=3, norm=1.0)
    w_null = directions[:, 0].to(torch.float64)
    generator = torch.Generator().manual_seed(0)
    resid = torch.randn(16, adapter.d_model, generator=generator, dtype=torch.float64) * 3
    resid = resid - (resid @ w_null)[:, None] * w_null
    alphas = np.linspace(0, 40, 21)
    entropies = np.stack([entropy_of(logits_from_residual(adapter, resid + a * w_null)).numpy() for a in alphas])
    assert np.all(np.diff(entropies, axis=0) > 0)
    assert np.all(entropies[-1] - entropies[0] > 0.1)
    frozen = [entropy_of(logits_from_residual(adapter, resid + a * w_null, final_norm(adapter).scale(resid))).numpy()
              for a in alphas]
    np.testing.assert_allclose(frozen[-1], frozen[0], atol=1e-9)  # direct path: nothing changes


def test_unigram_direction_is_centred_unit_add_one_log_frequency():
    counts = np.array([0, 1, 10, 100, 1000])
    u = unigram_direction(counts).numpy()
    assert abs(u.sum()) < 1e-12 and np.linalg.norm(u) == pytest.approx(1.0)
    log_p = np.log((counts + 1) / (counts + 1).sum())
    np.testing.assert_allclose(unigram_log_probs(counts), log_p)
    centred = log_p - log_p.mean()
    np.testing.assert_allclose(u, centred / np.linalg.norm(centred))


def test_token_frequency_neuron_has_unigram_cosine_near_one():
    """Counts built so log-frequency is a linear read-out of W_U: the neuron writing that direction scores ~1."""
    model = neuron_model("llama", vocab_size=200, d_mlp=64, seed=4)
    adapter = get_adapter(model)
    W_U = folded_unembedding(adapter)
    generator = torch.Generator().manual_seed(1)
    direction = torch.randn(adapter.d_model, generator=generator, dtype=torch.float64)
    readout = direction @ W_U
    counts = np.floor(np.exp(8 + 2 * (readout / readout.std()).numpy())).astype(np.int64)
    with torch.no_grad():
        adapter.W_out(1)[11].copy_(direction)  # its logit effect is direction @ folded W_U = readout
    stats = neuron_stats(adapter, layer=1, k=1, unigram=unigram_direction(counts))
    assert stats.unigram_cosine[11] > 0.98
    assert np.argmax(np.abs(stats.unigram_cosine)) == 11
    assert np.median(np.abs(np.delete(stats.unigram_cosine, 11))) < 0.4
    assert folded_W_out(adapter, 1).shape == (64, adapter.d_model)
