"""Feature store correctness against brute force, and resuming an interrupted build.

A tiny GPT-2 (real tokenizer, bundled corpus) with random SAEs whose features fire on ~1-20% of tokens. The brute
force runs the whole corpus in one batch through `capture()` (full forward pass, no early stop) and encodes
every token, then recomputes each statistic directly with numpy sorting.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from interpscope.capture import capture
from interpscope.config import InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.sae import SAEConfig, build_sae, load_sae, save_sae
from interpscope.sae.store import FeatureStore, build_store
from interpscope.sae.store import build as build_module
from interpscope.sae.store.layout import ARRAYS
from tests.sae_store_tiny import HOOK, random_sae_folder, tiny_lm

N_TOKENS, CONTEXT, BATCH = 3072, 64, 4


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def brute_force(lm, sae) -> np.ndarray:
    """Dense feature activations [n_seqs, context, d_sae] with position 0 zeroed."""
    ids = token_chunks(lm.tokenizer, CONTEXT, N_TOKENS)
    x = capture(lm.adapter, ids, [HOOK]).activations[HOOK]
    acts = sae.encode(x.float()).detach().numpy()
    acts[:, 0] = 0
    return acts


@pytest.mark.parametrize("arch", ["standard", "gated"])
def test_store_matches_brute_force(lm, tmp_path, arch):
    folder = random_sae_folder(lm, tmp_path / "sae", arch=arch)
    out = build_store(lm, folder, tmp_path / "store", n_tokens=N_TOKENS, context_size=CONTEXT, batch_size=BATCH)
    store = FeatureStore(out)
    sae = load_sae(folder)
    acts = brute_force(lm, sae)
    n_seqs, context, d_sae = acts.shape
    flat = acts.reshape(-1, d_sae)
    spec = store.spec
    K, intervals, P = spec["top_k"], spec["n_intervals"], spec["per_interval"]
    assert store.n_counted == n_seqs * (context - 1)
    np.testing.assert_array_equal(np.asarray(store.arrays["tokens"]), token_chunks(lm.tokenizer, CONTEXT, N_TOKENS))
    np.testing.assert_array_equal(store.arrays["fire_count"], (flat > 0).sum(0))
    np.testing.assert_allclose(store.density, (flat > 0).sum(0) / (n_seqs * (context - 1)))
    rng = np.random.default_rng(0)
    for i in rng.choice(d_sae, size=12, replace=False):
        column = flat[:, i]
        nonzero = column[column > 0]
        assert nonzero.size > K, "random SAE should fire often enough to fill the top contexts"
        order = np.argsort(-column, kind="stable")[:K]
        card = store.card(int(i))
        np.testing.assert_array_equal([(c.sequence, c.position) for c in card.top_contexts],
                                      [(t // context, t % context) for t in order])
        np.testing.assert_allclose([c.max for c in card.top_contexts], column[order], rtol=1e-5)
        assert card.max_activation == pytest.approx(nonzero.max(), rel=1e-5)
        assert card.mean_activation == pytest.approx(nonzero.mean(), rel=1e-4)
        counts, edges = np.histogram(nonzero, bins=spec["hist_bins"], range=(0, nonzero.max()))
        np.testing.assert_array_equal(card.histogram.counts, counts)
        np.testing.assert_allclose(card.histogram.edges, edges, rtol=1e-5)
        top = card.top_contexts[0]
        seq, pos = top.sequence, top.position
        lo = pos - top.centre
        expected = acts[seq, lo:lo + len(top.tokens), i]
        np.testing.assert_allclose(np.array(top.activations, float), expected, rtol=2e-3, atol=1e-4)
        assert top.tokens == [lm.tokenizer.decode([t]) for t in token_chunks(lm.tokenizer, CONTEXT, N_TOKENS)
                              [seq, lo:lo + len(top.tokens)].tolist()]
        width = nonzero.max() / intervals
        members = np.clip(np.ceil(nonzero / nonzero.max() * intervals) - 1, 0, intervals - 1)
        for j, interval in enumerate(card.intervals):
            assert len(interval.examples) == min(P, int((members == j).sum()))
            for example in interval.examples:
                value = acts[example.sequence, example.position, i]
                assert value == pytest.approx(example.max, rel=1e-5)
                assert j * width - 1e-6 <= value <= (j + 1) * width + 1e-6


def test_weight_statistics_match_brute_force(lm, tmp_path):
    folder = random_sae_folder(lm, tmp_path / "sae", d_sae=40)
    store = FeatureStore(build_store(lm, folder, tmp_path / "store", n_tokens=1024, context_size=CONTEXT,
                                     batch_size=BATCH))
    sae = load_sae(folder)
    W_dec = sae.W_dec.detach().double()
    gamma = lm.adapter.final_norm().weight.detach().double()
    logits = (W_dec * gamma) @ lm.adapter.unembedding().weight.detach().double().T
    unit = W_dec / W_dec.norm(dim=1, keepdim=True)
    cos = unit @ unit.T
    cos.fill_diagonal_(-2)
    for i in (0, 7, 39):
        card = store.card(i)
        top = torch.topk(logits[i], 10)
        assert [r.token for r in card.top_logits] == [lm.tokenizer.decode([int(j)]) for j in top.indices]
        np.testing.assert_allclose([r.weight for r in card.top_logits], top.values, rtol=1e-4)
        bottom = torch.topk(-logits[i], 10)
        np.testing.assert_allclose([r.weight for r in card.bottom_logits], -bottom.values, rtol=1e-4)
        counts, _ = np.histogram(logits[i].numpy(), bins=store.spec["hist_bins"])
        assert abs(np.asarray(card.logit_histogram.counts) - counts).sum() <= 2  # float32 vs float64 edges
        assert sum(card.logit_histogram.counts) == lm.adapter.vocab_size
        near = torch.topk(cos[i], 10)
        assert [n.feature for n in card.neighbours] == near.indices.tolist()
        np.testing.assert_allclose([n.cosine for n in card.neighbours], near.values, atol=1e-5)


def _store_files(folder: Path) -> dict[str, bytes]:
    # the output marker is bookkeeping with a random id of its own (interpscope.outputs), not the store's contents
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.name not in ("manifest.json", ".interpscope-output.json")}


def test_interrupted_build_resumes_to_identical_store(lm, tmp_path, monkeypatch):
    folder = random_sae_folder(lm, tmp_path / "sae")
    options = dict(n_tokens=2048, context_size=CONTEXT, batch_size=BATCH)
    reference = build_store(lm, folder, tmp_path / "reference", **options)
    n_chunks = 2048 // CONTEXT // BATCH

    calls = []
    real_encode = build_module.encode_ids

    def counting_encode(*args, **kwargs):
        calls.append(1)
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(build_module, "encode_ids", counting_encode)
    with pytest.raises(InterpscopeError, match="resume"):
        build_store(lm, folder, tmp_path / "resumed", stop=lambda: len(calls) >= 3, **options)
    partial = tmp_path / "resumed.partial"
    assert not (tmp_path / "resumed").exists()
    assert sorted(p.name for p in partial.glob("chunk_*.npz")) == [f"chunk_{i:05d}.npz" for i in range(3)]
    # what a kill mid-write leaves: a temporary file of a process that is gone (interpscope.atomic's names, tagged
    # with the data directory's secret; a file merely named like one is a person's and stays:
    # tests/cli/test_output_ownership.py)
    from interpscope.atomic import temp_prefix

    (partial / (temp_prefix(partial / "chunk_00003.npz", 4194305) + "abcdefgh.tmp")).write_bytes(
        b"half a chunk, as left by a kill")
    calls.clear()
    resumed = build_store(lm, folder, tmp_path / "resumed", **options)
    assert len(calls) == n_chunks - 3
    assert not partial.exists()
    assert _store_files(resumed) == _store_files(reference)
    manifests = [json.loads((f / "manifest.json").read_text()) for f in (reference, resumed)]
    for manifest in manifests:
        manifest.pop("build_seconds")
    assert manifests[0] == manifests[1]
    assert set(ARRAYS) <= {p.stem for p in resumed.glob("*.npy")}


def test_partial_build_with_other_settings_is_refused_or_forced_afresh(lm, tmp_path):
    folder = random_sae_folder(lm, tmp_path / "sae")
    with pytest.raises(InterpscopeError):
        build_store(lm, folder, tmp_path / "s", n_tokens=1024, context_size=CONTEXT, batch_size=BATCH,
                    stop=lambda: True)
    assert len(list((tmp_path / "s.partial").glob("chunk_*.npz"))) == 1
    with pytest.raises(InterpscopeError, match=f"context_size: {CONTEXT} in the unfinished build, 32 now"):
        build_store(lm, folder, tmp_path / "s", n_tokens=1024, context_size=32, batch_size=BATCH)
    assert len(list((tmp_path / "s.partial").glob("chunk_*.npz"))) == 1
    out = build_store(lm, folder, tmp_path / "s", n_tokens=1024, context_size=32, batch_size=BATCH, force=True)
    assert FeatureStore(out).spec["context_size"] == 32
    assert np.asarray(FeatureStore(out).arrays["tokens"]).shape[1] == 32
    with pytest.raises(InterpscopeError, match="other settings"):
        build_store(lm, folder, tmp_path / "s", n_tokens=1024, context_size=CONTEXT, batch_size=BATCH)
    assert build_store(lm, folder, tmp_path / "s", n_tokens=1024, context_size=32, batch_size=BATCH) == out


def test_bad_store_inputs(lm, tmp_path):
    folder = random_sae_folder(lm, tmp_path / "sae")
    with pytest.raises(InterpscopeError, match="at least one window"):
        build_store(lm, folder, tmp_path / "s", n_tokens=10, context_size=CONTEXT)
    with pytest.raises(InterpscopeError, match="not a complete feature store"):
        FeatureStore(tmp_path)
    other = save_sae(build_sae(SAEConfig(d_in=16, d_sae=8, model_name="other", hook_name=HOOK)), tmp_path / "sae2")
    with pytest.raises(InterpscopeError, match="Shape mismatch"):
        build_store(lm, other, tmp_path / "s2", n_tokens=1024, context_size=CONTEXT)


def test_store_refuses_an_sae_changed_after_the_build(lm, tmp_path):
    folder = random_sae_folder(lm, tmp_path / "sae")
    store = FeatureStore(build_store(lm, folder, tmp_path / "s", n_tokens=512, context_size=CONTEXT))
    assert store.load_sae().cfg.d_sae == 48 and not store.is_stale()
    sae = load_sae(folder)
    with torch.no_grad():
        sae.b_enc.add_(0.1)
    save_sae(sae, folder)
    assert store.is_stale()
    with pytest.raises(InterpscopeError, match="changed after the store"):
        store.load_sae()


def test_store_from_an_activation_cache_matches_the_model_pass(lm, tmp_path, monkeypatch):
    from interpscope.sae.activations import build_activation_cache

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    folder = random_sae_folder(lm, tmp_path / "sae")
    options = dict(n_tokens=1024, context_size=CONTEXT, batch_size=BATCH)
    live = FeatureStore(build_store(lm, folder, tmp_path / "live", **options))
    assert live.spec["activations"] == "model"
    cache = build_activation_cache(lm, HOOK, 4096, context_size=CONTEXT, dtype="float32")
    cached = FeatureStore(build_store(lm, folder, tmp_path / "cached", use_cache=True, **options))
    assert cached.spec["activations"] == "cache"
    np.testing.assert_array_equal(cached.arrays["fire_count"], live.arrays["fire_count"])
    np.testing.assert_array_equal(cached.arrays["top_loc"], live.arrays["top_loc"])
    np.testing.assert_allclose(cached.arrays["top_act"], live.arrays["top_act"], rtol=1e-4)
    np.testing.assert_array_equal(cached.arrays["tokens"], live.arrays["tokens"])

    rows = np.memmap(cache.folder / "acts.bin", dtype=np.float32, mode="r+", shape=(cache.n_rows, cache.d_in))
    rows[:] = rows[::-1].copy()  # a cache of other text: the live check must reject it
    rows.flush()
    rejected = FeatureStore(build_store(lm, folder, tmp_path / "rejected", use_cache=True, **options))
    assert rejected.spec["activations"] == "model"
    np.testing.assert_array_equal(rejected.arrays["top_loc"], live.arrays["top_loc"])
