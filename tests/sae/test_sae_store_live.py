"""Prompt view, feature attribution, steering/ablation and search on tiny models with random SAEs."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from interpscope.capture import capture
from interpscope.config import InterpscopeError
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.sae import load_sae
from interpscope.sae.store import FeatureStore, build_store
from interpscope.sae.store.prompt import feature_attribution, prompt_features
from interpscope.sae.store.search import search
from interpscope.sae.store.steering import steer
from tests.sae_store_tiny import HOOK, random_sae_folder, tiny_lm
from tests.tiny import loaded as wrap_loaded
from tests.tiny import tiny_llama

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


@pytest.fixture(scope="module")
def sae_folder(lm, tmp_path_factory):
    return random_sae_folder(lm, tmp_path_factory.mktemp("sae") / "sae")


@pytest.fixture(scope="module")
def store(lm, sae_folder, tmp_path_factory):
    out = build_store(lm, sae_folder, tmp_path_factory.mktemp("store") / "store", n_tokens=2048, context_size=64,
                      batch_size=4)
    return FeatureStore(out)


def test_prompt_features_match_direct_encoding(lm, sae_folder):
    sae = load_sae(sae_folder)
    view = prompt_features(lm, sae, TEXT, n_top=5, prepend_bos=False)
    ids = lm.encode(TEXT)
    direct = sae.encode(capture(lm.adapter, ids, [HOOK]).activations[HOOK].float()).detach().numpy()
    assert view.sink_positions == [] and view.excluded_positions == [] and not view.bos_prepended
    np.testing.assert_allclose(view.activations, direct, rtol=1e-5, atol=1e-7)
    assert view.tokens == lm.token_strings(ids[0])
    peak = direct.max(0)  # nothing measured as a sink, nothing prepended: the first word is ranked too
    assert view.top_features == list(np.argsort(-peak, kind="stable")[:5])
    np.testing.assert_array_equal(view.top_values, view.activations[:, view.top_features])
    active = view.active_at(3)
    assert [a["feature"] for a in active] == list(np.flatnonzero(direct[3] > 0)[np.argsort(-direct[3][direct[3] > 0],
                                                                                          kind="stable")])
    with pytest.raises(InterpscopeError):
        view.active_at(len(view.tokens))
    with pytest.raises(InterpscopeError, match="empty"):
        prompt_features(lm, sae, "   ")
    with pytest.raises(InterpscopeError, match="limit"):
        prompt_features(lm, sae, "word " * 2000)


def test_gradient_x_input_attribution_equals_autograd(lm, sae_folder):
    sae = load_sae(sae_folder)
    view = prompt_features(lm, sae, TEXT, prepend_bos=False)
    feature = view.top_features[0]
    position = int(np.argmax(view.top_values[:, 0]))
    result = feature_attribution(lm, sae, TEXT, feature, position, method="gradxinput", prepend_bos=False)
    ids = lm.encode(TEXT)
    embeds = lm.adapter.embedding()(ids).detach().requires_grad_(True)
    with torch.enable_grad():
        out = lm.model(inputs_embeds=embeds, output_hidden_states=True)
        value = sae.encode(out.hidden_states[1][0, position][None])[0, feature]
        (grad,) = torch.autograd.grad(value, embeds)
    assert result.activation == pytest.approx(view.activations[position, feature], rel=1e-5)
    np.testing.assert_allclose(result.relevance, (embeds * grad)[0].sum(-1).detach().numpy(), rtol=1e-4, atol=1e-7)
    assert np.all(result.relevance[position + 1:] == 0)  # causal: later tokens cannot drive it
    assert result.sae_bias_share == pytest.approx(result.activation - result.at_hook)
    with pytest.raises(InterpscopeError, match="Position"):
        feature_attribution(lm, sae, TEXT, feature, 999)
    with pytest.raises(InterpscopeError, match="one backward pass"):
        feature_attribution(lm, sae, TEXT, feature, 1, method="occlusion")


def test_cplrp_attribution_conserves_relevance_from_hook_to_inputs(tmp_path):
    model = tiny_llama(vocab=50257, seed=1).double()
    llama = wrap_loaded(model, gpt2_tokenizer(), name="tiny-llama")
    sae = load_sae(random_sae_folder(llama, tmp_path / "sae", hook="blocks.1.hook_resid_post"), dtype="float64")
    view = prompt_features(llama, sae, TEXT)
    feature, position = view.top_features[0], int(np.argmax(view.top_values[:, 0]))
    result = feature_attribution(llama, sae, TEXT, feature, position, method="cplrp")
    assert result.activation > 0
    assert result.input_sum == pytest.approx(result.at_hook, rel=1e-6)
    assert result.relevance[position + 1:].tolist() == [0.0] * (len(result.tokens) - position - 1)


def test_steering_and_ablation(lm, sae_folder):
    sae = load_sae(sae_folder)
    view = prompt_features(lm, sae, TEXT, prepend_bos=False)
    feature = view.top_features[0]
    zero = steer(lm, sae, TEXT, feature, "add", strength=0.0, n_new=4, prepend_bos=False)
    assert zero.kl == 0.0 and zero.clean_continuation == zero.edited_continuation
    assert zero.clean_top == zero.edited_top and np.all(zero.logprob_change == 0)
    pushed = steer(lm, sae, TEXT, feature, "add", strength=50.0, n_new=4, prepend_bos=False)
    assert pushed.kl > 1e-3
    np.testing.assert_allclose(pushed.feature_on_prompt, view.activations[:, feature], rtol=1e-5)
    assert [t["prob"] for t in pushed.clean_top] == sorted((t["prob"] for t in pushed.clean_top), reverse=True)
    ablated = steer(lm, sae, TEXT, feature, "ablate", n_new=4, prepend_bos=False)
    ids = lm.encode(TEXT)
    direction = sae.W_dec[feature].detach()
    edited = [i for i in range(ids.shape[1]) if i not in view.excluded_positions]  # what the prompt view reads

    def remove(tensor):
        f = sae.encode(tensor[:, edited])[..., feature]
        out = tensor.clone()
        out[:, edited] -= f[..., None] * direction
        return out

    from interpscope.capture import hooks

    with torch.no_grad(), hooks(lm.adapter, {HOOK: remove}):
        manual = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), -1)
    with torch.no_grad():
        clean = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), -1)
    following = ids[0, 1:]
    rows = torch.arange(following.numel())
    np.testing.assert_allclose(ablated.logprob_change, (manual[rows, following] - clean[rows, following]).numpy(),
                               atol=1e-6)
    silent = int(np.flatnonzero(view.activations[edited].max(0) == 0)[0])
    assert steer(lm, sae, TEXT, silent, "ablate", n_new=0, prepend_bos=False).kl == 0.0
    with pytest.raises(InterpscopeError):
        steer(lm, sae, TEXT, feature, "double")
    with pytest.raises(InterpscopeError):
        steer(lm, sae, TEXT, sae.cfg.d_sae, "add")


def test_prompt_view_prepends_the_bos_reads_the_first_word_and_every_live_view_shares_its_positions(lm, sae_folder):
    """GPT-2's tokenizer adds no BOS: by default the prompt view puts <|endoftext|> first, excludes it and names why,
    and reads the first word at position 1 like any other; attribution and steering given the same option see the
    same tokens at the same positions (the prompt view's position p is their position p), with or without it."""
    sae = load_sae(sae_folder)
    bos = lm.tokenizer.bos_token_id
    with_bos = prompt_features(lm, sae, TEXT)
    without = prompt_features(lm, sae, TEXT, prepend_bos=False)
    assert with_bos.bos_prepended and with_bos.token_ids == [bos] + without.token_ids
    assert with_bos.sinks[0]["position"] == 0 and with_bos.sinks[0]["prepended"]
    assert with_bos.sinks[0]["reason"].startswith("prepended BOS")
    assert with_bos.excluded_positions == sorted({0, *with_bos.sink_positions})
    ids = torch.cat([torch.tensor([[bos]]), lm.encode(TEXT)], dim=1)
    direct = sae.encode(capture(lm.adapter, ids, [HOOK]).activations[HOOK].float()).detach().numpy()
    np.testing.assert_allclose(with_bos.activations, direct, rtol=1e-5, atol=1e-7)
    assert 1 not in with_bos.excluded_positions  # the first word is read and ranked
    readable = np.delete(direct, with_bos.excluded_positions, axis=0)
    assert with_bos.top_features[0] == int(np.argmax(readable.max(0)))
    for view, option in ((with_bos, None), (without, False)):
        feature = view.top_features[0]
        position = int(np.argmax(view.activations[:, feature]))
        attribution = feature_attribution(lm, sae, TEXT, feature, position, "gradxinput", prepend_bos=option)
        assert attribution.tokens == view.tokens and attribution.position == position
        assert attribution.activation == pytest.approx(view.activations[position, feature], rel=1e-5)
        steered = steer(lm, sae, TEXT, feature, "add", strength=0.0, n_new=0, prepend_bos=option)
        assert steered.tokens == view.tokens
        np.testing.assert_allclose(steered.feature_on_prompt, view.activations[:, feature], rtol=1e-5, atol=1e-7)
    assert with_bos.tokens[1:] == without.tokens  # the same words, one position later


@contextmanager
def _sink_on_the_first_word(lm, text):
    """A real measured sink at position 0 of `text` (prepend_bos=False): its first token's embedding x1000."""
    first = int(lm.encode(text)[0, 0])
    weight = lm.model.transformer.wte.weight
    saved = weight[first].detach().clone()
    with torch.no_grad():
        weight[first] *= 1000.0
    try:
        yield
    finally:
        with torch.no_grad():
            weight[first] = saved


def _steered_positions(lm, sae, text, prepend_bos=False):
    """Which prompt positions steering changed at the SAE's hook: the clean and the edited rows' activations right
    after the hook (block 1's input is block 0's output, so nothing else comes between)."""
    from interpscope.capture import hooks

    seen = []
    with hooks(lm.adapter, {"blocks.1.hook_resid_pre": lambda t: seen.append(t.detach().clone())}, role="read"):
        steer(lm, sae, text, 0, "add", strength=50.0, n_new=0, prepend_bos=prepend_bos)
    clean, edited = seen[-2][0], seen[-1][0]  # the prompt's rows run one by one: clean first, then edited
    return [i for i in range(clean.shape[0]) if not torch.equal(clean[i], edited[i])]


def test_steering_edits_the_first_word_unless_it_is_a_measured_sink(lm, sae_folder):
    """Without a prepended BOS, steering leaves out exactly what the prompt view excludes: the first word is edited
    when the one sink helper does not measure it as a sink, and left alone when it does."""
    sae = load_sae(sae_folder)
    n_tokens = lm.encode(TEXT).shape[1]
    assert prompt_features(lm, sae, TEXT, prepend_bos=False).excluded_positions == []
    assert _steered_positions(lm, sae, TEXT) == list(range(n_tokens))  # position 0 included
    with _sink_on_the_first_word(lm, TEXT):
        view = prompt_features(lm, sae, TEXT, prepend_bos=False)
        assert view.excluded_positions == [0] and view.sinks[0]["reason"].startswith("measured attention sink")
        assert _steered_positions(lm, sae, TEXT) == list(range(1, n_tokens))
    # by default the prepended BOS is position 0 and left out; the first word is edited
    assert _steered_positions(lm, sae, TEXT, prepend_bos=None) == list(range(1, n_tokens + 1))


def test_the_circuit_splices_the_first_word_unless_it_is_a_measured_sink(lm, sae_folder):
    """The circuit's splice leaves out the same positions: with prepend_bos=False the first word's upstream features
    get relevance when it is no sink, none when it is measured to be one."""
    from interpscope.sae.circuits import feature_circuit

    sae = load_sae(sae_folder)
    circuit = feature_circuit(lm, sae, None, TEXT, n_token_edges=0, prepend_bos=False)
    assert np.abs(circuit.feature_relevance[0]).sum() > 0
    with _sink_on_the_first_word(lm, TEXT):
        sunk = feature_circuit(lm, sae, None, TEXT, n_token_edges=0, prepend_bos=False)
    assert np.abs(sunk.feature_relevance[0]).sum() == 0 and np.abs(sunk.feature_relevance[1:]).sum() > 0


def test_search_by_id_logit_and_context(lm, store):
    assert [r["feature"] for r in search(store, "#7, 3", "id")] == [7, 3]
    for bad in ("", "abc", "-1", str(store.d_sae), "x" * 101):
        with pytest.raises(InterpscopeError):
            search(store, bad, "id")
    card = store.card(5)
    token = card.top_logits[0].token
    hits = search(store, token.strip().upper() if token.strip().isalpha() else token, "logit")
    assert any(h["feature"] == 5 and h["rank"] == 1 for h in hits)
    table = np.asarray(store.arrays["logit_top_ids"])
    expected = {f for f in range(store.d_sae) if any(store.token_text(int(t)).strip().lower() == token.strip().lower()
                                                   for t in table[f])}
    assert {h["feature"] for h in hits} == expected
    assert search(store, "zzqqxx", "logit") == []
    top = store.card(2).top_contexts[0]
    word = next(t.strip() for t in top.tokens if t.strip().isalpha() and len(t.strip()) > 3)
    found = search(store, word, "context", lm.tokenizer)
    assert 2 in [r["feature"] for r in found]
    for row in found[:5]:
        texts = [" ".join(c.tokens).lower() for c in store.card(row["feature"]).top_contexts]
        assert sum(word.lower() in t for t in texts) >= row["contexts"] >= 1
    phrase = "".join(top.tokens[top.centre - 1: top.centre + 1]).strip()
    assert 2 in [r["feature"] for r in search(store, phrase, "context", lm.tokenizer)]
    with pytest.raises(InterpscopeError):
        search(store, "x", "colour")
