"""Corpus-scale jobs on a local 2-worker Ray cluster write exactly what one process writes, and survive a killed
worker (its shard re-run on the restarted actor), a stopped driver (the rerun skips the finished shards) and a SIGKILLed
driver process with its workers (the same).

Workers are other processes, so the model is a tiny GPT-2 saved as a folder (tests.sae_store_tiny.save_tiny_lm)
and loaded by path on both sides; one cluster serves the whole module.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from interpscope.models import load_model
from interpscope.scale import Scale
from tests.sae_store_tiny import HOOK, random_sae_folder, save_tiny_lm

CONTEXT, BATCH = 32, 4


class _Stop(Exception):
    """A driver stopped mid-job."""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    import ray

    root = tmp_path_factory.mktemp("scale")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    lm = load_model(str(save_tiny_lm(root / "model")), device="cpu")
    sae = random_sae_folder(lm, root / "sae", d_sae=32)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield root, lm, sae
    ray.shutdown()
    monkeypatch.undo()


def _kill_one_worker(scale: Scale):
    """A progress callback that SIGKILLs the first worker's process when the first result arrives."""
    killed: list[int] = []

    def progress(*_args) -> None:
        if not killed and scale.stats.worker_pids:
            killed.append(scale.stats.worker_pids[0])
            os.kill(killed[0], signal.SIGKILL)
    return progress, killed


def _stop_after(n: int):
    calls: list[int] = []

    def progress(*_args) -> None:
        calls.append(1)
        if len(calls) == n:
            raise _Stop
    return progress


def test_activation_cache_is_byte_identical_after_a_killed_worker_and_a_stopped_driver(env):
    from interpscope.sae.activations import build_activation_cache

    root, lm, _ = env
    options = dict(context_size=CONTEXT, batch_size=BATCH, dtype="float32")
    one = build_activation_cache(lm, HOOK, 4096, folder=root / "cache-one", **options)
    scale = Scale(workers=2, shard_batches=2)
    progress, killed = _kill_one_worker(scale)
    survived = build_activation_cache(lm, HOOK, 4096, folder=root / "cache-kill", progress=progress, scale=scale,
                                      **options)
    assert killed and not _alive(killed[0])
    _assert_restarted_and_each_shard_once(scale, killed[0])
    n_shards = -(-one.n_rows // (CONTEXT - 1) // (2 * BATCH))
    with pytest.raises(_Stop):
        build_activation_cache(lm, HOOK, 4096, folder=root / "cache-stop", progress=_stop_after(3),
                               scale=Scale(workers=2, shard_batches=2), **options)
    assert not (root / "cache-stop" / "meta.json").exists()
    rerun = Scale(workers=2, shard_batches=2)
    resumed = build_activation_cache(lm, HOOK, 4096, folder=root / "cache-stop", scale=rerun, **options)
    assert rerun.stats.shards == n_shards - 3  # the finished shards were skipped
    for cache in (survived, resumed):
        assert (cache.folder / "acts.bin").read_bytes() == (one.folder / "acts.bin").read_bytes()
        assert json.loads((cache.folder / "meta.json").read_text()) == json.loads((one.folder / "meta.json")
                                                                                   .read_text())


def _assert_restarted_and_each_shard_once(scale: Scale, killed_pid: int) -> None:
    """What a killed worker guarantees under any schedule: its actor came back in a new process (every actor
    answered from a live process at the end of the run, the killed one from a new pid), and every shard was
    delivered exactly once (whichever worker ran its retry)."""
    stats = scale.stats
    assert killed_pid in stats.worker_pids and killed_pid not in stats.final_pids
    assert len(stats.final_pids) == len(stats.worker_pids)
    assert len(set(stats.final_pids) - set(stats.worker_pids)) == 1
    assert len(stats.delivered) == len(set(stats.delivered)) == stats.shards


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _same_store(a: Path, b: Path) -> None:
    files = sorted(p.name for p in a.iterdir() if p.name != ".interpscope-output.json")
    assert files == sorted(p.name for p in b.iterdir() if p.name != ".interpscope-output.json")
    for name in files:
        if name != "manifest.json":
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    manifests = [json.loads((f / "manifest.json").read_text()) for f in (a, b)]
    for manifest in manifests:
        manifest.pop("build_seconds")
    assert manifests[0] == manifests[1]


def test_feature_store_is_byte_identical_on_workers_after_a_kill_and_across_a_stop(env):
    from interpscope.sae.store import build_store

    root, lm, sae = env
    options = dict(n_tokens=3072, context_size=CONTEXT, batch_size=BATCH, eval_tokens=256)
    one = build_store(lm, sae, root / "store-one", **options)
    scale = Scale(workers=2)
    progress, killed = _kill_one_worker(scale)
    on_ray = build_store(lm, sae, root / "store-ray", progress=progress, scale=scale, **options)
    assert killed
    _assert_restarted_and_each_shard_once(scale, killed[0])
    _same_store(one, on_ray)
    stops: list[int] = []
    with pytest.raises(Exception, match="resume"):
        build_store(lm, sae, root / "store-stop", stop=lambda: stops.append(1) or len(stops) >= 2,
                    scale=Scale(workers=2, shard_batches=3), **options)
    chunks = sorted((root / "store-stop.partial").glob("chunk_*.npz"))
    assert 6 <= len(chunks) < 3072 // CONTEXT // BATCH
    resumed = build_store(lm, sae, root / "store-stop", **options)  # finished in one process
    _same_store(one, resumed)


def test_evaluation_numbers_are_equal_on_workers(env):
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_saes

    root, lm, sae = env
    other = random_sae_folder(lm, root / "sae-gated", d_sae=24, arch="gated", seed=5)
    saes = [load_sae(sae), load_sae(other)]
    one = evaluate_saes(lm, saes, n_tokens=2048, context_size=CONTEXT, batch_size=3)
    scale = Scale(workers=2)
    many = evaluate_saes(lm, saes, n_tokens=2048, context_size=CONTEXT, batch_size=3, scale=scale)
    assert scale.stats.shards > 2 and len(scale.stats.pids_seen) == 2
    for a, b in zip(one, many, strict=True):
        assert a.summary() == b.summary()
        assert a.density.tobytes() == b.density.tobytes()
        assert a.log10_density_counts.tobytes() == b.log10_density_counts.tobytes()


def test_neuron_stores_are_identical_on_workers(env):
    from interpscope.entropy_neurons import store as store_module
    from interpscope.entropy_neurons.page_store import StoreSpec
    from interpscope.entropy_neurons.store_build import build_neuron_store

    root, lm, _ = env
    scale = Scale(workers=2)
    many = store_module.activation_stores(lm, [0, 1], n_tokens=1024, seq_len=CONTEXT, scale=scale)
    assert scale.stats.shards == 1024 // CONTEXT // 8 // scale.shard_batches
    folder = store_module._sample_dir(lm, 1024, CONTEXT, None, "train")
    on_ray = {p.name: p.read_bytes() for p in folder.glob("*.npy")}
    shutil.rmtree(folder)
    one = store_module.activation_stores(lm, [0, 1], n_tokens=1024, seq_len=CONTEXT)
    assert on_ray == {p.name: p.read_bytes() for p in folder.glob("*.npy")} and len(on_ray) == 7
    assert np.array_equal(many[1].mean, one[1].mean)
    spec = StoreSpec(n_tokens=1024, seq_len=CONTEXT)
    stores = [build_neuron_store(lm, root / "neurons-one", layers=[1], spec=spec),
              build_neuron_store(lm, root / "neurons-ray", layers=[1], spec=spec, scale=Scale(workers=2))]
    manifests = [json.loads((s / "manifest.json").read_text()) for s in stores]
    for manifest in manifests:
        manifest.pop("build_seconds")
    assert manifests[0] == manifests[1]
    assert (stores[0] / "unigram_counts.npy").read_bytes() == (stores[1] / "unigram_counts.npy").read_bytes()
    layers = [np.load(s / "layer1.npz") for s in stores]
    assert layers[0].files == layers[1].files
    for name in layers[0].files:  # the zip entries carry their write time; the arrays are bit for bit equal
        assert layers[0][name].tobytes() == layers[1][name].tobytes(), name
    assert not any(p.name.endswith(".shards") for s in stores for p in s.iterdir())


def test_fourier_filter_table_is_identical_on_workers():
    from interpscope.fourier.filters import filter_table
    from interpscope.fourier.probe import probe_pairs, single_token_setup

    adder = load_model("adder", device="cpu")
    numbers = single_token_setup(adder, None)
    pairs = probe_pairs(numbers.n_numbers, 120, split="test")
    one = filter_table(adder, numbers, pairs, batch_size=50)
    scale = Scale(workers=2)
    many = filter_table(adder, numbers, pairs, batch_size=50, scale=scale)
    from interpscope.fourier.controls import DEFAULT_CONTROL_SEEDS

    runs = 1 + 6 * (1 + DEFAULT_CONTROL_SEEDS)  # clean, six filters, each with its same-rank random controls
    assert scale.stats.shards == runs * 3
    for a, b in zip(one.rows, many.rows, strict=True):
        assert (a.kind, a.modules, a.loss, a.accuracy, a.rank) == (b.kind, b.modules, b.loss, b.accuracy, b.rank)
        assert a.errors.tobytes() == b.errors.tobytes() and a.error_counts == b.error_counts
    assert one.warnings == many.warnings


def test_explanations_file_is_identical_on_workers(env):
    from interpscope.sae.store import FeatureStore, build_store
    from interpscope.sae.store.explain import explain_store, model_writer, negative_pool
    from interpscope.sae.store.explain_jobs import explain_store_on_ray

    root, lm, sae = env
    explainer_dir = _tiny_explainer(root / "explainer")
    store = build_store(lm, sae, root / "explain-store", n_tokens=2048, context_size=CONTEXT, batch_size=BATCH,
                        eval_tokens=0)
    shutil.copytree(store, root / "explain-ray")
    pool = negative_pool(lm, FeatureStore(store).load_sae(), FeatureStore(store))
    features = list(range(10))
    one = explain_store(FeatureStore(store), model_writer(load_model(str(explainer_dir), device="cpu")), pool,
                        features=features, batch_size=3)
    many = explain_store_on_ray(FeatureStore(root / "explain-ray"), str(explainer_dir), pool, features=features,
                                workers=2, batch_size=3, device="cpu")
    assert one == many and len(one) >= 5
    assert (store / "explanations.jsonl").read_bytes() == (root / "explain-ray" / "explanations.jsonl").read_bytes()


def _tiny_explainer(folder: Path) -> Path:
    """A random tiny GPT-2 with room for the explainer's prompts and a chat template, saved as a folder."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from interpscope.models.tokenizers import gpt2_tokenizer

    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=1024)).eval()
    tokenizer = gpt2_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %} Answer:"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_cli_store_with_two_workers_matches_the_api(env, capsys):
    from interpscope.cli import main
    from interpscope.sae.store import build_store

    root, lm, sae = env
    options = ["--tokens", "2048", "--context", str(CONTEXT), "--batch-size", str(BATCH), "--eval-tokens", "0"]
    assert main(["sae", "store", "--sae", str(sae), "--model", lm.name, "--device", "cpu", "--out",
                 str(root / "cli-store"), "--workers", "2", *options]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 2048
    reference = build_store(lm, sae, root / "cli-reference", n_tokens=2048, context_size=CONTEXT, batch_size=BATCH,
                            eval_tokens=0)
    _same_store(reference, root / "cli-store")


def test_a_sigkilled_driver_on_workers_resumes_to_the_same_store(env):
    """`sae store --workers 2` in its own process (its own local cluster), SIGKILLed with its process group once
    some chunks are on disk; the rerun finishes from them and writes exactly the uninterrupted store."""
    import subprocess
    import sys
    import time

    from interpscope.sae.store import build_store

    root, lm, sae = env
    options = dict(n_tokens=32768, context_size=CONTEXT, batch_size=BATCH, eval_tokens=0)
    out = root / "store-killed"
    partial = out.with_name(out.name + ".partial")
    command = [sys.executable, "-m", "interpscope.cli", "sae", "store", "--sae", str(sae), "--model", lm.name,
               "--device", "cpu", "--out", str(out), "--workers", "2", "--tokens", "32768", "--context",
               str(CONTEXT), "--batch-size", str(BATCH), "--eval-tokens", "0"]
    driver = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[2], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    deadline = time.time() + 240
    while time.time() < deadline and driver.poll() is None and len(list(partial.glob("chunk_*.npz"))) < 8:
        time.sleep(0.02)
    assert driver.poll() is None, "the build ended before it could be killed"
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(30)
    done = len(list(partial.glob("chunk_*.npz")))
    assert 8 <= done < 32768 // CONTEXT // BATCH and not (out / "manifest.json").exists()
    resumed = build_store(lm, sae, out, **options)  # the rerun, here in one process
    _same_store(build_store(lm, sae, root / "store-uninterrupted", **options), resumed)
