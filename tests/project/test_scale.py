"""The parts of scaling out that need no cluster: sharding whole batches, resuming from finished ranges, the
one-line error without Ray, batch sizes from free memory, host copies, and the precision tolerances checked by
running a tiny model in bfloat16 on the CPU against float32."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from interpscope.scale import Scale
from interpscope.scale.memory import auto_batch_size, batch_size_arg, resolve_batch_size, window_bytes
from interpscope.scale.pool import batch_shards
from interpscope.scale.shards import ShardFiles, covered, gaps, merge_intervals
from interpscope.scale.tolerance import (
    activations_close,
    conservation_close,
    relative_error,
    relevance_close,
    sae_metrics_far,
)
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm


def test_shards_are_the_single_process_batches_grouped():
    assert batch_shards(10, 3, None) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert batch_shards(10, 3, Scale(workers=2, shard_batches=2)) == [(0, 6), (6, 10)]
    done = [[3, 6]]
    assert batch_shards(13, 3, Scale(workers=2, shard_batches=2), lambda a, b: covered(done, a, b)) == \
        [(0, 3), (6, 12), (12, 13)]  # never a shard across a finished batch, never a batch cut anew


def test_intervals_and_shard_files(tmp_path):
    assert merge_intervals([[6, 9], [0, 3], [3, 6], [12, 15]]) == [[0, 9], [12, 15]]
    assert gaps([[0, 9], [12, 15]], 20) == [(9, 12), (15, 20)]
    assert covered([[0, 9]], 3, 9) and not covered([[0, 9]], 6, 12)
    files = ShardFiles(tmp_path / "shards")
    files.save(4, 8, {"x": np.arange(4)})
    files.save(0, 4, {"x": np.arange(4) + 10})
    (tmp_path / "shards" / "left-by-a-kill.npz.tmp").write_bytes(b"half")
    assert files.intervals() == [[0, 8]]
    assert np.concatenate([part["x"] for part in files.load_all()]).tolist() == [10, 11, 12, 13, 0, 1, 2, 3]
    (tmp_path / "shards" / "notes.txt").write_text("not ours")
    files.remove()
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("command", [
    ["sae", "eval", "--sae", "no-such-folder", "--workers", "2"],
    ["sae", "store", "--sae", "no-such-folder", "--ray-address", "auto"],
    ["neurons", "store", "--out", "x", "--workers", "2"],
    ["fourier", "filter", "--kind", "low", "--modules", "mlp", "--workers", "3"],
    ["sae", "train", "--hook", "blocks.0.hook_resid_post", "--out", "x", "--workers", "2"],
    ["sae", "explain", "--store", "no-such-store", "--workers", "2"],
])
def test_workers_without_ray_is_one_line_and_status_2(command, monkeypatch, capsys, tmp_path):
    from interpscope.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if it were not installed
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("interpscope.models.loading.load_model",
                        lambda *args, **kwargs: pytest.fail("the model must not load before the Ray check"))
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install -e .[scale]" in err[0]


def test_auto_batch_size_from_free_memory():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert auto_batch_size(cpu, 1000, cpu_default=8, free=10 ** 9) == 8  # plenty of RAM: the usual batch
    assert auto_batch_size(cpu, 10 ** 8, cpu_default=8, free=4 * 10 ** 8) == 2  # short of RAM: smaller
    assert auto_batch_size(cpu, 10 ** 9, cpu_default=8, free=10 ** 8) == 1
    assert auto_batch_size(cuda, 10 ** 6, cpu_default=8, free=80 * 10 ** 6) == 40  # half the free GPU memory
    assert auto_batch_size(cuda, 10, cpu_default=8, free=10 ** 12) == 512
    assert batch_size_arg("auto") == "auto" and batch_size_arg("12") == 12
    for bad in ("0", "-3", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            batch_size_arg(bad)


def test_window_bytes_grow_with_the_window_and_the_logits(tmp_path):
    from interpscope.models import load_model

    lm = load_model(str(save_tiny_lm(tmp_path / "m")), device="cpu")
    small, large = window_bytes(lm.adapter, 32, torch.float32), window_bytes(lm.adapter, 128, torch.float32)
    assert large > 4 * small > 0
    assert window_bytes(lm.adapter, 32, torch.float32, logits=True) > small + 32 * lm.adapter.vocab_size * 28 - 1
    assert window_bytes(lm.adapter, 32, torch.bfloat16) < small
    assert 1 <= resolve_batch_size("auto", lm, context=32, default=8) <= 8
    assert resolve_batch_size(5, lm, context=32, default=8) == 5


def test_host_copy_on_the_cpu_is_the_float32_values():
    from interpscope.scale.transfer import to_device, to_host

    x = torch.randn(5, 3, dtype=torch.bfloat16)
    copy = to_host(x, torch.float16).numpy()
    assert copy.dtype == np.float32 and np.array_equal(copy, x.float().numpy())
    assert to_device(x, torch.device("cpu")) is x


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from interpscope.models import load_model

    folder = save_tiny_lm(tmp_path_factory.mktemp("precision") / "m")
    return {dtype: load_model(str(folder), device="cpu", dtype=dtype) for dtype in ("float32", "bfloat16")}


def test_bfloat16_relevance_is_within_its_tolerance_and_outside_float32s(models):
    from interpscope.relevance.api import explain

    text = "The capital of France is Paris, and the capital of Spain is"
    reference = explain(models["float32"], text, method="attnlrp")
    half = explain(models["bfloat16"], text, method="attnlrp", target=reference.target)
    assert 0 < relative_error(half.relevance, reference.relevance)
    assert relevance_close(half.relevance, reference.relevance, torch.bfloat16)
    assert not relevance_close(half.relevance, reference.relevance, torch.float32)
    ref_error, half_error = reference.conservation.relative_error, half.conservation.relative_error
    assert conservation_close(half_error, ref_error, torch.bfloat16)
    assert not conservation_close(half_error, ref_error, torch.float32)
    assert relevance_close(reference.relevance, reference.relevance.copy(), torch.float32)


def test_plain_gradient_maps_get_the_looser_half_precision_tolerance(models):
    from interpscope.relevance.api import explain
    from interpscope.scale.tolerance import relevance_tolerance

    text = "The capital of France is Paris, and the capital of Spain is"
    reference = explain(models["float32"], text, method="gradxinput")
    half = explain(models["bfloat16"], text, method="gradxinput", target=reference.target)
    assert relevance_close(half.relevance, reference.relevance, torch.bfloat16, method="gradxinput")
    for dtype in (torch.bfloat16, torch.float16):
        assert relevance_tolerance(dtype, "gradxinput") > relevance_tolerance(dtype, "attnlrp")
    assert relevance_tolerance(torch.float32, "gradxinput") == relevance_tolerance(torch.float32, "attnlrp")


def test_bfloat16_sae_metrics_and_activations_are_within_their_tolerance(models, tmp_path):
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae
    from interpscope.sae.store.encode import hook_activations

    sae = load_sae(random_sae_folder(models["float32"], tmp_path / "sae"))
    summaries = {name: evaluate_sae(lm, sae, n_tokens=1024, context_size=64).summary()
                 for name, lm in models.items()}
    assert sae_metrics_far(summaries["bfloat16"], summaries["float32"], torch.bfloat16) == []
    assert sae_metrics_far(summaries["bfloat16"], summaries["float32"], torch.float32) != []
    ids = torch.arange(64)[None] + 100
    acts = {name: hook_activations(lm, "blocks.1.hook_resid_post", ids).float().numpy()
            for name, lm in models.items()}
    assert activations_close(acts["bfloat16"], acts["float32"], torch.bfloat16)
    assert not activations_close(acts["bfloat16"], acts["float32"], torch.float32)


def test_sae_training_batches_on_a_device_keep_their_order(tmp_path):
    from interpscope.models import load_model
    from interpscope.sae.activations import ShuffledBuffer, build_activation_cache

    lm = load_model(str(save_tiny_lm(tmp_path / "m")), device="cpu")
    cache = build_activation_cache(lm, "blocks.0.hook_resid_post", 2048, context_size=32, folder=tmp_path / "c")
    plain = ShuffledBuffer(cache, 50, buffer_rows=620, block_rows=62, seed=1).batches()
    placed = ShuffledBuffer(cache, 50, buffer_rows=620, block_rows=62, seed=1, device="cpu").batches()
    for _ in range(30):
        assert torch.equal(next(plain), next(placed))
    assert Path(cache.folder / "acts.bin").stat().st_size == cache.n_rows * 32 * 2
