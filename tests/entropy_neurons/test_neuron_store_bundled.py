"""The shipped entropy-neuron store of the bundled SmolLM2 is what the code computes, and it shows no sinks.

Before sinks were left out, all ten top contexts of neuron 29.830 were position 0 of their windows (activation
~50, a separate histogram cluster at 48-52); every other token stays below ~24.
"""
from __future__ import annotations

import numpy as np
import pytest

from interpscope import corpus
from interpscope.entropy_neurons.cards import neuron_detail, stored_detail, text_activations
from interpscope.entropy_neurons.page import neuron_card, neuron_page
from interpscope.entropy_neurons.page_store import find_neuron_store
from interpscope.entropy_neurons.store import ActivationStore, kept_mean, run_layers

pytestmark = pytest.mark.bundled
LAYER = 29


@pytest.fixture(scope="module")
def shipped(bundled_lm):
    store = find_neuron_store(bundled_lm)
    assert store is not None and LAYER in store.layers, "assets/neuron_stores/smollm2-135m is missing"
    return store


def test_position_0_never_tops_a_neuron_and_contexts_have_left_context(bundled_lm, shipped):
    card = neuron_card(bundled_lm, LAYER, 830)
    assert card.source.startswith("precomputed store")
    assert len(card.contexts) == 10 and all(c.position >= 1 for c in card.contexts)
    assert max(c.activation for c in card.contexts) < 40.0, "a sink (~50) was ranked"
    assert card.histogram_edges[-1] < 40.0, "the sink cluster at 48-52 is back in the histogram"
    assert card.excluded_tokens >= 64  # position 0 of each of the 64 windows, plus massive rows
    data = shipped.layer(LAYER)
    assert (data["context_where"][..., 1][data["context_where"][..., 1] >= 0] >= 1).all()


def test_shipped_store_equals_a_fresh_computation(bundled_lm, shipped):
    spec = shipped.spec
    tokens = corpus.token_chunks(bundled_lm.tokenizer, spec.seq_len, spec.n_tokens, split="train")
    acts, excluded = run_layers(bundled_lm, tokens, [LAYER])
    fresh = ActivationStore(layer=LAYER, activations=acts[LAYER], tokens=tokens.numpy(),
                            mean=kept_mean(acts[LAYER], excluded[LAYER]), excluded=excluded[LAYER])
    data = shipped.layer(LAYER)
    np.testing.assert_allclose(data["mean"], fresh.mean, rtol=1e-5, atol=1e-6)
    for index in (830, 0, 1535):
        stored = stored_detail(shipped, bundled_lm, LAYER, index)
        computed = neuron_detail(bundled_lm, LAYER, index, store=fresh)
        assert [(c.tokens, c.position) for c in stored.contexts] == [(c.tokens, c.position) for c in computed.contexts]
        np.testing.assert_allclose(stored.histogram_counts, computed.histogram_counts, atol=2)
        assert stored.sink_positions == computed.sink_positions


def test_page_open_reads_the_store_and_text_view_names_what_it_left_out(bundled_lm, shipped):
    page = neuron_page(bundled_lm)
    assert page.store == str(shipped.folder) and page.layer == LAYER
    from interpscope.entropy_neurons.ranking import candidates

    live = candidates(bundled_lm, layer=LAYER, k=page.k)
    # float32 agreement: the shipped SmolLM2 store's statistics predate the write-through-the-output-norm code,
    # whose order of float32 operations differs (rho 2e-5 relative, unigram cosines 2.3e-5 absolute at most, measured)
    np.testing.assert_allclose(page.stats.rho, live.rho, rtol=1e-4)
    np.testing.assert_allclose(page.stats.unigram_cosine, live.unigram_cosine, rtol=1e-4, atol=5e-5)
    assert page.default_neurons == [f"{LAYER}.{i}" for i in live.ranking()[:3]]
    seen = text_activations(bundled_lm, "It is a truth universally acknowledged, that a single man", ["29.830"])
    assert seen.excluded_positions[0] == 0
    assert seen.activation[0, 0] > 40.0 and seen.scale[0] < 40.0
