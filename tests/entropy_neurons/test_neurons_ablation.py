"""Mean ablation on tiny models with a planted entropy neuron: direct ~0, total clearly non-zero; the fast
final-layer path against a real forward pass; frozen unigram; KL; the guard on the norm-mediated share."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import capture
from interpscope.entropy_neurons.ablation import Neuron, parse_neurons, random_neurons, summarise, token_effects
from interpscope.entropy_neurons.folding import folded_unembedding
from interpscope.entropy_neurons.metrics import freeze_unigram, kl_to_unigram, norm_mediated_share
from interpscope.entropy_neurons.unigram import unigram_direction, unigram_log_probs
from interpscope.entropy_neurons.weights import neuron_stats
from tests.tiny import loaded, neuron_model, plant_entropy_neuron

PLANTED = Neuron(1, 5)


def _planted(family: str, vocab: int = 200, seed: int = 0):
    model = neuron_model(family, vocab_size=vocab, seed=seed)
    plant_entropy_neuron(model, PLANTED.layer, PLANTED.index, k=1, norm=30.0)
    return loaded(model, None)


def _means(lm, tokens, layers):
    names = [f"blocks.{layer}.mlp.hook_post" for layer in layers]
    run = capture(lm.adapter, tokens, names)
    return {layer: run.activations[name].reshape(-1, lm.adapter.d_mlp).mean(0).numpy()
            for layer, name in zip(layers, names, strict=True)}


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_planted_entropy_neuron_acts_only_through_the_norm(family):
    lm = _planted(family)
    tokens = torch.randint(0, 200, (6, 24), generator=torch.Generator().manual_seed(0))
    neurons = [PLANTED] + random_neurons(lm.adapter, [PLANTED], 6, seed=1)
    effects = token_effects(lm, neurons, tokens, _means(lm, tokens, [1]))
    direct_h, total_h = np.abs(effects.entropy_direct).mean(1), np.abs(effects.entropy_total).mean(1)
    direct_l, total_l = np.abs(effects.loss_direct).mean(1), np.abs(effects.loss_total).mean(1)
    assert direct_h[0] < 1e-9 and direct_l[0] < 1e-9
    assert total_h[0] > 1e-4 and total_l[0] > 1e-3
    assert total_l[0] > 20 * np.median(total_l[1:])
    # random neurons act mostly directly: their direct effect is of the same order as their total effect
    assert np.all(direct_l[1:] > 0.3 * total_l[1:])
    rows = summarise(effects, _means(lm, tokens, [1]), set(neurons[1:]), {n: (0.0, 0.0) for n in neurons})
    assert rows[0].norm_share == pytest.approx(1.0, abs=1e-6) and not rows[0].is_random


@pytest.mark.parametrize("family,rtol,atol", [("gpt2", 1e-9, 1e-11), ("gpt_neox", 1e-9, 1e-11),
                                              ("llama", 1e-4, 2e-5)])  # LlamaRMSNorm computes in float32
def test_fast_final_layer_path_matches_a_real_forward(family, rtol, atol):
    lm = _planted(family, seed=2)
    tokens = torch.randint(0, 200, (3, 16), generator=torch.Generator().manual_seed(2))
    neurons = [PLANTED, Neuron(1, 9), Neuron(0, 3)]
    means = _means(lm, tokens, [0, 1])
    counts = np.random.default_rng(0).integers(0, 100, 200)
    fast = token_effects(lm, neurons, tokens, means, counts, fast_final_layer=True)
    slow = token_effects(lm, neurons, tokens, means, counts, fast_final_layer=False)
    for key in ("loss_total", "entropy_total", "loss_frozen_unigram", "kl_unigram_ablated", "loss_direct"):
        np.testing.assert_allclose(getattr(fast, key), getattr(slow, key), rtol=rtol, atol=atol)
    # a layer-0 neuron's total effect includes later layers; its direct effect is only the direct path
    assert not np.allclose(fast.loss_total[2], fast.loss_direct[2])


def test_frozen_unigram_restores_the_component_exactly():
    generator = torch.Generator().manual_seed(0)
    counts = np.random.default_rng(1).integers(0, 1000, 300)
    u = unigram_direction(counts)
    clean = torch.randn(7, 300, generator=generator, dtype=torch.float64)
    ablated = clean + torch.randn(7, 300, generator=generator, dtype=torch.float64) + 3 * u
    frozen = freeze_unigram(ablated, clean, u)
    np.testing.assert_allclose((frozen @ u).numpy(), (clean @ u).numpy(), atol=1e-12)
    residual = frozen - ablated  # only the u component moved
    np.testing.assert_allclose((residual - (residual @ u)[:, None] * u).numpy(), 0, atol=1e-12)


def test_kl_to_unigram_matches_the_definition():
    counts = np.array([5, 0, 30, 2, 9])
    logits = torch.tensor([[1.0, -2.0, 0.5, 0.0, 3.0]], dtype=torch.float64)
    p = torch.softmax(logits, -1).numpy()[0]
    q = (counts + 1) / (counts + 1).sum()
    expected = float((p * np.log(p / q)).sum())
    assert kl_to_unigram(logits, torch.from_numpy(unigram_log_probs(counts))).item() == pytest.approx(expected)


def test_norm_mediated_share_guard():
    assert norm_mediated_share(0.2, 1.0)[0] == pytest.approx(0.8)
    assert norm_mediated_share(-0.2, 1.0)[0] == pytest.approx(0.8)
    share, note = norm_mediated_share(0.5, 0.2)
    assert share is None and "exceeds" in note
    share, note = norm_mediated_share(0.0, 0.0)
    assert share is None and "~0" in note


def test_token_frequency_neuron_effect_is_mostly_along_the_unigram_direction():
    """A neuron whose logit effect is the unigram direction: freezing that component removes most of its effect."""
    model = neuron_model("llama", vocab_size=200, seed=6)
    lm = loaded(model, None)
    adapter = lm.adapter
    direction = torch.randn(adapter.d_model, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    readout = direction @ folded_unembedding(adapter)
    counts = np.floor(np.exp(8 + 2 * (readout / readout.std()).numpy())).astype(np.int64)
    with torch.no_grad():
        adapter.W_out(1)[4].copy_(direction / direction.norm() * 20)
    tokens = torch.from_numpy(np.random.default_rng(4).choice(200, size=(4, 24), p=counts / counts.sum()))
    effects = token_effects(lm, [Neuron(1, 4), Neuron(1, 8)], tokens, _means(lm, tokens, [1]), counts)
    direct = np.abs(effects.loss_direct).mean(1)
    direct_frozen = np.abs(effects.loss_direct_frozen_unigram).mean(1)
    assert direct_frozen[0] < 0.05 * direct[0]  # its direct effect is (almost) all along u
    assert direct_frozen[1] > 0.5 * direct[1]  # an ordinary neuron keeps most of its direct effect
    total = np.abs(effects.loss_total).mean(1)
    frozen = np.abs(effects.loss_frozen_unigram).mean(1)
    assert frozen[0] < total[0] and frozen[0] / total[0] < frozen[1] / total[1]
    kl_change = np.abs(effects.kl_unigram_ablated[0] - effects.clean_kl_unigram).mean()
    assert kl_change > np.abs(effects.kl_unigram_ablated[1] - effects.clean_kl_unigram).mean()
    stats = neuron_stats(adapter, 1, k=1, unigram=unigram_direction(counts))
    assert abs(stats.unigram_cosine[4]) > 0.95


def test_parse_neurons_checks_input():
    lm = _planted("gpt2")
    assert parse_neurons(["1.5", "0.2", "1.5", (-1, 3)], lm.adapter) == [Neuron(1, 5), Neuron(0, 2), Neuron(1, 3)]
    for bad in (["1"], ["a.b"], ["9.1"], ["1.640"], []):
        with pytest.raises(Exception) as info:
            parse_neurons(bad, lm.adapter)
        assert type(info.value).__name__ == "InterpscopeError"


def test_random_neurons_exclude_chosen_and_stay_in_layer():
    lm = _planted("gpt2")
    picked = random_neurons(lm.adapter, [Neuron(1, 5), Neuron(0, 1)], 10, seed=3)
    assert len(picked) == 20 and Neuron(1, 5) not in picked and Neuron(0, 1) not in picked
    assert {n.layer for n in picked} == {0, 1}
    assert picked == random_neurons(lm.adapter, [Neuron(1, 5), Neuron(0, 1)], 10, seed=3)
