"""Activation cache (resumable, atomic), shuffled buffer, and short real training runs on a tiny GPT-2:
the loss falls, the report is finite, an interrupted run resumes to the same weights."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from interpscope.config import InterpscopeError
from interpscope.sae import load_sae
from interpscope.sae.activations import ShuffledBuffer, build_activation_cache
from interpscope.sae.evaluation import evaluate_sae
from interpscope.sae.pipeline import SAESpec, export_checkpoint, train_saes
from interpscope.sae.training import TrainConfig
from tests.sae_store_tiny import HOOK, tiny_lm


@pytest.fixture(scope="module")
def lm():
    torch.set_num_threads(1)
    return tiny_lm()


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))


class _Interrupt(Exception):
    pass


def test_activation_cache_resumes_and_matches_an_uninterrupted_build(lm, tmp_path):
    calls = []

    def stop_after_first(done, total):
        calls.append(done)
        raise _Interrupt

    with pytest.raises(_Interrupt):
        build_activation_cache(lm, HOOK, 3000, context_size=32, batch_size=4, folder=tmp_path / "c",
                               progress=stop_after_first)
    assert not (tmp_path / "c" / "meta.json").exists() and (tmp_path / "c" / "acts.partial").exists()
    resumed_from = []
    cache = build_activation_cache(lm, HOOK, 3000, context_size=32, batch_size=4, folder=tmp_path / "c",
                                   progress=lambda done, total: resumed_from.append(done))
    assert resumed_from[0] == calls[0] + 4 * 31  # picked up after the batch already on disk
    fresh = build_activation_cache(lm, HOOK, 3000, context_size=32, batch_size=4, folder=tmp_path / "f")
    assert cache.n_rows == fresh.n_rows == (3000 // 32) * 31
    assert np.array_equal(np.asarray(cache.array), np.asarray(fresh.array))
    assert not (tmp_path / "c" / "acts.partial").exists()
    # the cached rows are the model's activations at the hook, first position of each context left out
    from interpscope.capture import capture
    from interpscope.corpus import token_chunks

    ids = token_chunks(lm.tokenizer, 32, 3000)
    acts = capture(lm.adapter, ids[:1], [HOOK]).activations[HOOK][1:]
    torch.testing.assert_close(torch.from_numpy(np.asarray(cache.array[:31], dtype=np.float32)), acts,
                               atol=2e-3, rtol=2e-3)


def test_shuffled_buffer_covers_each_row_once_per_epoch_and_skips_exactly(lm, tmp_path):
    cache = build_activation_cache(lm, HOOK, 4096, context_size=32, batch_size=8, folder=tmp_path / "c",
                                   dtype="float32")
    buffer = ShuffledBuffer(cache, 62, buffer_rows=1240, block_rows=124, seed=3)
    rows_per_epoch = buffer.n_blocks * buffer.block_rows
    batches = buffer.batches()
    epoch = torch.cat([next(batches) for _ in range(rows_per_epoch // 62)])
    data = torch.from_numpy(np.array(cache.array[:rows_per_epoch], dtype=np.float32))
    assert torch.equal(epoch[epoch[:, 0].argsort()], data[data[:, 0].argsort()])
    later = [next(batches) for _ in range(5)]
    other = ShuffledBuffer(cache, 62, buffer_rows=1240, block_rows=124, seed=3)
    other.skip(rows_per_epoch // 62)
    resumed = other.batches()
    for expected in later:
        assert torch.equal(next(resumed), expected)


SPECS = [SAESpec("relu", 128, 1.0), SAESpec("gated", 128, 1.0), SAESpec("topk", 128, k=8),
         SAESpec("jumprelu", 128, 0.05)]


def test_short_training_lowers_the_loss_and_reports_finite_figures(lm, tmp_path):
    saved = train_saes(lm, HOOK, SPECS, tmp_path / "run", tokens=256 * 120, cache_tokens=6000, context_size=32,
                       batch_size=256, lr=3e-3, warmup_steps=10, resample_at=(0.5,), dead_window_tokens=256 * 30,
                       checkpoint_every=0, log_every=10)
    assert set(saved) == {"relu-128-l1", "gated-128-l1", "topk-128-k8", "jumprelu-128-l0.05"}
    for name, folder in saved.items():
        history = json.loads((folder / "history.json").read_text())
        first, last = history[0], history[-1]
        assert last["recon"] < 0.6 * first["recon"], (name, first, last)
        assert last["fvu"] < first["fvu"]
        sae = load_sae(folder)
        assert sae.cfg.training_tokens == 256 * 120 and sae.cfg.hook_name == HOOK
        report = evaluate_sae(lm, sae, n_tokens=1024, context_size=32)
        summary = report.summary()
        for key in ("l0", "fvu", "explained_variance", "mse", "cosine", "shrinkage", "ce_clean", "ce_sae",
                    "ce_zero", "loss_recovered", "kl", "dead_fraction", "dense_fraction"):
            assert math.isfinite(summary[key]), (name, key, summary[key])
        assert 0 < report.l0 < 128 and report.fvu < 1.0 and report.cosine > 0.5
        assert report.density.shape == (128,) and report.log10_density_counts.sum() == (report.density > 0).sum()
        if name.startswith("topk"):
            assert report.l0 == pytest.approx(8, abs=0.5)


def test_training_never_stops_short_of_the_requested_tokens(lm, tmp_path):
    """A budget that is not a whole number of batches rounds up: 3 batches and one row asked -> 4 batches seen."""
    assert TrainConfig(total_tokens=4096 * 1220 + 2880, batch_size=4096).total_steps == 1221
    assert TrainConfig(total_tokens=4096 * 1220, batch_size=4096).total_steps == 1220
    saved = train_saes(lm, HOOK, SPECS[:1], tmp_path / "run", tokens=256 * 3 + 1, cache_tokens=6000, context_size=32,
                       batch_size=256, warmup_steps=1, checkpoint_every=0)
    history = json.loads((saved["relu-128-l1"] / "history.json").read_text())
    assert load_sae(saved["relu-128-l1"]).cfg.training_tokens == 256 * 4 == history[-1]["tokens"]


def test_interrupted_training_resumes_to_identical_weights(lm, tmp_path):
    kwargs = dict(tokens=256 * 40, cache_tokens=6000, context_size=32, batch_size=256, lr=3e-3, warmup_steps=5,
                  resample_at=(0.5,), dead_window_tokens=256 * 10, checkpoint_every=7, log_every=5)
    specs = SPECS[:2]
    straight = train_saes(lm, HOOK, specs, tmp_path / "a", **kwargs)
    steps = []

    def stop():
        steps.append(1)
        return len(steps) == 14

    train_saes(lm, HOOK, specs, tmp_path / "b", stop=stop, **kwargs)
    latest = json.loads((tmp_path / "b" / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 14
    partial = export_checkpoint(tmp_path / "b")
    assert load_sae(partial["relu-128-l1"]).cfg.training_tokens == 14 * 256
    resumed = train_saes(lm, HOOK, specs, tmp_path / "b", **kwargs)
    for name in straight:
        a = load_file(str(straight[name] / "sae_weights.safetensors"))
        b = load_file(str(resumed[name] / "sae_weights.safetensors"))
        for key in a:
            assert torch.equal(a[key], b[key]), (name, key)


def test_bad_training_requests_are_explained(lm, tmp_path):
    with pytest.raises(InterpscopeError, match="needs --k"):
        train_saes(lm, HOOK, [SAESpec("topk", 64)], tmp_path / "x", tokens=1024, cache_tokens=2000,
                   context_size=32, batch_size=256)
    with pytest.raises(InterpscopeError, match="Unknown hook point"):
        train_saes(lm, "blocks.0.resid", [SAESpec("relu", 64)], tmp_path / "x", tokens=1024)


def test_outlier_rows_are_dropped_and_do_not_set_the_scale(tmp_path):
    from dataclasses import asdict

    from interpscope.sae.activations import ActivationCache, CacheSpec

    rows, d = 4000, 8
    data = np.random.default_rng(0).normal(size=(rows, d)).astype(np.float32)
    data[123] *= 1000.0  # an attention-sink-like row
    folder = tmp_path / "synthetic"
    folder.mkdir()
    data.tofile(folder / "acts.bin")
    spec = CacheSpec("m", HOOK, d, rows, dtype="float32")
    (folder / "meta.json").write_text(json.dumps({"spec": asdict(spec), "n_rows": rows}))
    cache = ActivationCache(folder)
    typical = float((data ** 2).sum(-1)[np.arange(rows) != 123].mean())
    assert cache.mean_squared_norm() == pytest.approx(typical, rel=1e-5)
    buffer = ShuffledBuffer(cache, 100, buffer_rows=1000, block_rows=100, max_norm=10 * math.sqrt(typical))
    batches = buffer.batches()
    seen = torch.cat([next(batches) for _ in range(40)])
    assert seen.shape[0] == rows - 1 and buffer.rows_dropped == 1
    assert float(seen.norm(dim=-1).max()) < 10 * math.sqrt(typical)


def test_resampling_reinitialises_only_dead_features_towards_badly_reconstructed_inputs():
    from interpscope.sae import SAEConfig, build_sae
    from interpscope.sae.training import TrainConfig, Trainer, TrainRun

    sae = build_sae(SAEConfig(d_in=6, d_sae=10, architecture="gated"), dtype=torch.float64)
    run = TrainRun("g", sae, 1.0)
    trainer = Trainer([run], None, TrainConfig(total_tokens=640, batch_size=64, dead_window_tokens=64 * 3))
    x = torch.randn(64, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sae.loss(x, 1.0).total.backward()
    trainer._adam_step(run, 1e-3)
    trainer.step = 5
    run.last_fired = torch.tensor([5, 0, 5, 0, 5, 5, 5, 5, 5, 1])  # features 1, 3, 9 silent for >= 3 steps
    before = {name: p.detach().clone() for name, p in sae.named_parameters()}
    assert trainer._resample(run, x) == 3
    dead = torch.tensor([1, 3, 9])
    alive = torch.tensor([0, 2, 4, 5, 6, 7, 8])
    assert torch.equal(sae.W_dec[alive], before["W_dec"][alive])
    assert torch.equal(sae.W_enc[:, alive], before["W_enc"][:, alive])
    torch.testing.assert_close(sae.W_dec[dead].norm(dim=1), torch.ones(3, dtype=torch.float64))
    centred = x - sae.b_dec
    cosines = (sae.W_dec[dead] @ (centred / centred.norm(dim=1, keepdim=True)).T)
    assert torch.allclose(cosines.max(dim=1).values, torch.ones(3, dtype=torch.float64))  # each is an input
    for name in ("b_gate", "r_mag", "b_mag"):
        assert torch.count_nonzero(getattr(sae, name)[dead]) == 0
    assert torch.count_nonzero(run.state["W_dec"]["v"][dead]) == 0
    assert torch.count_nonzero(run.state["W_enc"]["v"][:, dead]) == 0
    assert torch.count_nonzero(run.state["W_dec"]["v"][alive]) > 0
    assert torch.equal(run.last_fired[dead], torch.full((3,), 5))
