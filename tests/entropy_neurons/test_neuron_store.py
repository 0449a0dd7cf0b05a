"""Neuron views leave attention sinks out, and the entropy-neuron store equals a fresh computation.

A tiny GPT-2 whose embedding of one token (" the") is scaled up 1000x plays a massive-activation row: its
residual stream is hundreds of times the median norm, and its MLP neurons fire far beyond every other token.
Position 0 of every window and those rows must never rank, never enter a histogram or a mean, never set a
colour scale, and every view must say which positions it left out.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.entropy_neurons import store as store_module
from interpscope.entropy_neurons.cards import neuron_detail, stored_detail, text_activations
from interpscope.entropy_neurons.page_store import NeuronStore, StoreSpec
from interpscope.entropy_neurons.store_build import build_neuron_store
from interpscope.models.tokenizers import gpt2_tokenizer
from tests.tiny import loaded, neuron_model

LAYER, SPEC = 1, StoreSpec(n_tokens=512, seq_len=32, top_contexts=8)
PLANTED = 11


@pytest.fixture(scope="module")
def sink_lm(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    model = neuron_model("gpt2", vocab_size=50257, d_model=32, d_mlp=64, dtype=torch.float32, seed=2)
    lm = loaded(model, gpt2_tokenizer(), name="tiny-sink")
    token = lm.tokenizer.encode(" the")[0]
    with torch.no_grad():
        lm.adapter.W_E()[token] *= 1000.0
        # neuron PLANTED reads the direction the massive row takes after the MLP's norm: it fires hardest there
        from interpscope.capture import capture

        ids = lm.encode("It is the truth")
        mid = capture(lm.adapter, ids, [f"blocks.{LAYER}.hook_resid_mid"]).activations[f"blocks.{LAYER}.hook_resid_mid"]
        normed = lm.adapter.mlp_norm(LAYER)(mid[2])
        lm.model.transformer.h[LAYER].mlp.c_fc.weight[:, PLANTED] = 40.0 * normed / normed.norm() ** 2
    yield lm, token
    mp.undo()


def _fresh(lm):
    """An activation store computed now, in float32 (no disk), over the store's corpus sample."""
    from interpscope import corpus

    tokens = corpus.token_chunks(lm.tokenizer, SPEC.seq_len, SPEC.n_tokens, split="train")
    acts, excluded = store_module.run_layers(lm, tokens, [LAYER])
    return store_module.ActivationStore(layer=LAYER, activations=acts[LAYER], tokens=tokens.numpy(),
                                        mean=store_module.kept_mean(acts[LAYER], excluded[LAYER]),
                                        excluded=excluded[LAYER]), tokens


def test_sinks_are_excluded_from_rankings_histograms_and_means(sink_lm):
    lm, token = sink_lm
    fresh, tokens = _fresh(lm)
    is_sink = tokens.numpy() == token
    assert is_sink[:, 1:].sum() >= 5, "the corpus sample must hold the planted token"
    expected = is_sink.copy()
    expected[:, 0] = True
    np.testing.assert_array_equal(fresh.excluded, expected)
    acts = fresh.activations
    index = PLANTED
    assert acts[..., index][is_sink].min() > 1.5 * acts[..., index][~expected].max(), "the sink must outrank all"
    detail = neuron_detail(lm, LAYER, index, k=1, store=fresh, top_contexts=8)
    assert detail.excluded_tokens == int(expected.sum()) and len(detail.sink_positions) == int(is_sink[:, 1:].sum())
    assert detail.histogram_counts.sum() == int((~expected).sum())
    assert detail.histogram_edges[-1] == pytest.approx(float(acts[..., index][~expected].max()))
    assert detail.mean_activation == pytest.approx(float(acts[..., index][~expected].astype(np.float64).mean()))
    assert all(c.position >= 1 and c.tokens[c.position] != " the" for c in detail.contexts)
    assert detail.contexts[0].activation == pytest.approx(float(acts[..., index][~expected].max()))

    text = text_activations(lm, "It is a truth that the man in the house", [f"{LAYER}.{index}"])
    sinks = [i for i, t in enumerate(text.tokens) if t == " the"]
    assert text.excluded_positions == [0] + sinks
    others = np.delete(text.activation[0], [0] + sinks)
    assert text.scale[0] == pytest.approx(float(np.abs(others).max()))
    assert np.abs(text.activation[0, sinks]).max() > 1.5 * text.scale[0]


def test_store_round_trips_and_equals_a_fresh_computation(sink_lm, tmp_path, monkeypatch):
    lm, _ = sink_lm
    out = build_neuron_store(lm, tmp_path / "store", layers=[LAYER], spec=SPEC)
    store = NeuronStore(out)
    fresh, _ = _fresh(lm)
    np.testing.assert_array_equal(store.layer(LAYER)["mean"], fresh.mean)
    for index in (0, 7, 63):
        shipped = stored_detail(store, lm, LAYER, index, k=1, top_contexts=8)
        computed = neuron_detail(lm, LAYER, index, k=1, store=fresh, top_contexts=8)
        np.testing.assert_array_equal(shipped.histogram_counts, computed.histogram_counts)
        np.testing.assert_allclose(shipped.histogram_edges, computed.histogram_edges, rtol=1e-6)
        assert shipped.mean_activation == computed.mean_activation
        assert [(c.tokens, c.position) for c in shipped.contexts] == [(c.tokens, c.position) for c in computed.contexts]
        np.testing.assert_allclose([c.activation for c in shipped.contexts], [c.activation for c in computed.contexts])
        assert shipped.sink_positions == computed.sink_positions and shipped.rho == computed.rho
    stats = store.stats(LAYER)
    from interpscope.entropy_neurons.ranking import candidates

    live = candidates(lm, layer=LAYER, k=stats.k)
    np.testing.assert_allclose(stats.rho, live.rho) and np.testing.assert_allclose(stats.norm, live.norm)

    def no_forward(*args, **kwargs):
        raise AssertionError("a finished layer must not be recomputed")

    monkeypatch.setattr("interpscope.entropy_neurons.store.run_layers", no_forward)
    build_neuron_store(lm, out, layers=[LAYER], spec=SPEC)  # resumes: nothing left to do
    with pytest.raises(InterpscopeError, match="other settings"):
        build_neuron_store(lm, out, layers=[LAYER], spec=StoreSpec(n_tokens=256, seq_len=32))


def test_store_never_writes_into_a_folder_it_does_not_own(sink_lm, tmp_path):
    lm, _ = sink_lm
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(InterpscopeError, match="not an entropy-neuron store"):
        build_neuron_store(lm, foreign, layers=[LAYER], spec=SPEC)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_cli_store_and_detail_json(sink_lm, tmp_path, capsys):
    from interpscope.cli import main
    from interpscope.config import data_dir

    lm, _ = sink_lm
    folder = tmp_path / "model"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    out = data_dir() / "neurons" / "stores" / "tiny-sink"
    assert main(["neurons", "store", "--model", str(folder), "--out", str(out), "--layers", str(LAYER),
                 "--tokens", "512", "--seq-len", "32"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["layers"] == [LAYER] and built["bytes"] > 0
    assert main(["neurons", "detail", "--model", str(folder), "--neuron", f"{LAYER}.3", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["layer"] == LAYER and card["index"] == 3 and card["source"].startswith("precomputed store")
    assert len(card["contexts"]) == 10
    assert all(c["position"] >= 1 for c in card["contexts"])
    assert main(["neurons", "detail", "--model", str(folder), "--neuron", "9.3"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
