"""Neurons behind an MLP output norm (Gemma 3's post_feedforward_layernorm): a tiny Gemma 3 with a planted
entropy neuron whose *post-normed* write lies in W_U's bottom singular direction, under large uneven output-norm
gains. The finder must rank it first on what it writes (not on its row of W_out, which points elsewhere), and
its mean-ablation total effect must equal the model run with a hook that sets its activation to the mean."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import capture, hooks, scoped
from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.ablation import Neuron, random_neurons, token_effects
from interpscope.entropy_neurons.folding import folded_W_out
from interpscope.entropy_neurons.metrics import loss_and_entropy
from interpscope.entropy_neurons.postnorm import typical_scale
from interpscope.entropy_neurons.weights import neuron_stats, stats_for_vectors, unembed_basis
from tests.tiny import loaded, neuron_model, plant_entropy_neuron

PLANTED = Neuron(1, 5)
VOCAB = 200


@pytest.fixture(scope="module")
def planted():
    model = neuron_model("gemma3", vocab_size=VOCAB, seed=0)
    plant_entropy_neuron(model, PLANTED.layer, PLANTED.index, k=1, norm=30.0, hide_in_gains=300.0)
    lm = loaded(model, None)
    tokens = torch.randint(3, VOCAB, (6, 24), generator=torch.Generator().manual_seed(0))
    run = capture(lm.adapter, tokens, [f"blocks.{PLANTED.layer}.mlp.hook_post"])
    acts = run.activations[f"blocks.{PLANTED.layer}.mlp.hook_post"].numpy()
    excluded = np.zeros(acts.shape[:2], dtype=bool)
    excluded[:, 0] = True
    means = {PLANTED.layer: acts.reshape(-1, acts.shape[-1])[~excluded.reshape(-1)].mean(0)}
    return lm, tokens, acts, excluded, means


def test_the_output_norm_has_large_uneven_gains(planted):
    lm = planted[0]
    gains = lm.adapter.folded_norm(lm.adapter.mlp_output_norm(PLANTED.layer)).gamma
    assert float(gains.max()) > 1000 and float(gains.max() / gains.min()) > 100


def test_typical_scale_is_the_mean_rms_of_the_norms_input(planted):
    """Read the output norm's input with a scoped capture hook and average its RMS over the kept positions."""
    lm, tokens, acts, excluded, _ = planted
    module = lm.adapter.mlp_output_norm(PLANTED.layer)
    seen = []
    with scoped([(module, lambda mod, args, kwargs: seen.append(args[0].detach()))], role="read", kind="input"):
        lm.model(input_ids=tokens, use_cache=False)
    rms = torch.sqrt(seen[0].double().pow(2).mean(-1) + lm.adapter.norm_eps(module)).numpy()
    assert typical_scale(lm.adapter, PLANTED.layer, acts, excluded) == pytest.approx(rms[~excluded].mean(),
                                                                                    rel=1e-5)


def test_planted_neuron_ranks_first_on_what_it_writes_and_not_on_w_out(planted):
    lm, _, acts, excluded, _ = planted
    adapter = lm.adapter
    scale = typical_scale(adapter, PLANTED.layer, acts, excluded)
    stats = neuron_stats(adapter, PLANTED.layer, k=1, post_scale=scale)
    assert stats.ranking()[0] == PLANTED.index
    assert stats.rho[PLANTED.index] == pytest.approx(1.0, abs=1e-9)
    assert np.median(np.delete(stats.rho, PLANTED.index)) < 0.6
    # the old reading, W_out's row alone, would not have found it
    old = stats_for_vectors(unembed_basis(adapter), adapter.W_out(PLANTED.layer).detach(), 1)
    assert int(np.argmax(old["rho"])) != PLANTED.index
    assert old["rho"][PLANTED.index] < 0.5
    # the write's norm is gamma * w_out / r at the measured typical scale
    gamma = adapter.folded_norm(adapter.mlp_output_norm(PLANTED.layer)).gamma
    expected = float((gamma * adapter.W_out(PLANTED.layer)[PLANTED.index]).detach().norm()) / scale
    assert stats.norm[PLANTED.index] == pytest.approx(expected, rel=1e-9)


def test_weight_statistics_need_the_output_norms_scale(planted):
    with pytest.raises(InterpscopeError, match="post_scale"):
        folded_W_out(planted[0].adapter, PLANTED.layer)


def _hooked_reference(lm, tokens, neuron: Neuron, mean: float):
    """Loss and entropy per predicted token with the neuron's activation set to its mean by a capture hook."""
    def edit(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor[..., neuron.index] = mean
        return tensor

    with torch.no_grad(), hooks(lm.adapter, {f"blocks.{neuron.layer}.mlp.hook_post": edit}):
        logits = lm.model(input_ids=tokens, use_cache=False).logits
    return loss_and_entropy(logits[:, :-1].double(), tokens[:, 1:])


def test_total_effect_equals_a_hooked_forward_pass(planted):
    lm, tokens, _, _, means = planted
    neurons = [PLANTED] + random_neurons(lm.adapter, [PLANTED], 4, seed=1)
    effects = token_effects(lm, neurons, tokens, means)
    with torch.no_grad():
        clean_loss, clean_entropy = loss_and_entropy(lm.model(input_ids=tokens).logits[:, :-1].double(),
                                                     tokens[:, 1:])
    for i, neuron in enumerate(neurons):
        loss, entropy = _hooked_reference(lm, tokens, neuron, float(means[neuron.layer][neuron.index]))
        # Gemma3RMSNorm computes in float32 whatever the model's dtype: agreement to float32 precision
        np.testing.assert_allclose(effects.loss_total[i], (loss - clean_loss).flatten().numpy(), rtol=1e-4,
                                   atol=2e-5)
        np.testing.assert_allclose(effects.entropy_total[i], (entropy - clean_entropy).flatten().numpy(),
                                   rtol=1e-4, atol=2e-5)
    planted_total = np.abs(effects.loss_total[0]).mean()
    assert planted_total > 1e-3
    # its write is invisible to W_U: the direct effect (every norm's scale frozen) is ~0, the total is not
    assert np.abs(effects.loss_direct[0]).mean() < 1e-6 * max(1.0, planted_total) + 1e-9


def test_layer_zero_neuron_total_effect_goes_through_the_model(planted):
    lm, tokens, _, _, _ = planted
    run = capture(lm.adapter, tokens, ["blocks.0.mlp.hook_post"])
    mean0 = run.activations["blocks.0.mlp.hook_post"].reshape(-1, lm.adapter.d_mlp).mean(0).numpy()
    neuron = Neuron(0, 3)
    effects = token_effects(lm, [neuron], tokens, {0: mean0})
    loss, _ = _hooked_reference(lm, tokens, neuron, float(mean0[3]))
    with torch.no_grad():
        clean, _ = loss_and_entropy(lm.model(input_ids=tokens).logits[:, :-1].double(), tokens[:, 1:])
    np.testing.assert_allclose(effects.loss_total[0], (loss - clean).flatten().numpy(), rtol=1e-4, atol=2e-5)


def test_store_keeps_the_output_norms_scale_and_a_stale_store_is_rebuilt(tmp_path, monkeypatch):
    """A store built on a post-norm model records the typical scale its statistics used; a layer file without it
    (written before writes went through the norm) is never served and is rebuilt in place."""
    from interpscope.config import data_dir
    from interpscope.entropy_neurons.page_store import StoreSpec, find_neuron_store
    from interpscope.entropy_neurons.store import run_layers
    from interpscope.entropy_neurons.store_build import build_neuron_store
    from interpscope.models.tokenizers import gpt2_tokenizer

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    model = neuron_model("gemma3", vocab_size=50257, dtype=torch.float32, seed=4)
    plant_entropy_neuron(model, PLANTED.layer, PLANTED.index, k=1, norm=30.0, hide_in_gains=300.0)
    lm = loaded(model, gpt2_tokenizer(), name="tiny-gemma3")
    spec = StoreSpec(n_tokens=256, seq_len=32, top_contexts=4)
    folder = data_dir() / "neurons" / "stores" / "tiny-gemma3"
    build_neuron_store(lm, folder, spec=spec)
    store = find_neuron_store(lm)
    assert store is not None and store.folder == folder
    from interpscope import corpus

    tokens = corpus.token_chunks(lm.tokenizer, spec.seq_len, spec.n_tokens, split="train")
    acts, excluded = run_layers(lm, tokens, [PLANTED.layer])
    scale = typical_scale(lm.adapter, PLANTED.layer, acts[PLANTED.layer], excluded[PLANTED.layer])
    assert store.post_scale(PLANTED.layer) == pytest.approx(scale, rel=1e-6)
    stats = store.stats(PLANTED.layer)
    fresh = neuron_stats(lm.adapter, PLANTED.layer, k=stats.k, post_scale=scale)
    np.testing.assert_allclose(stats.norm, fresh.norm, rtol=1e-5)
    np.testing.assert_allclose(stats.rho, fresh.rho, atol=1e-9)
    assert stats.ranking()[0] == PLANTED.index and stats.post_scale == pytest.approx(scale, rel=1e-6)
    # an old layer file: the same arrays without post_norm_scale
    path = folder / f"layer{PLANTED.layer}.npz"
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files if name != "post_norm_scale"}
    np.savez_compressed(path, **arrays)
    from interpscope.entropy_neurons.page_store import _load_layer

    _load_layer.cache_clear()
    assert find_neuron_store(lm) is None
    build_neuron_store(lm, folder, spec=spec)
    with np.load(path) as data:
        assert float(data["post_norm_scale"]) == pytest.approx(scale, rel=1e-6)
    assert find_neuron_store(lm) is not None
