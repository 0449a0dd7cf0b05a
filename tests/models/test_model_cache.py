"""The one model cache: one copy per resolved location, device and dtype; least recently used out under a budget."""
from __future__ import annotations

import os
import threading

import pytest
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.models import loading
from interpscope.models.cache import MEMORY_ENV, ModelCache, estimate_bytes, memory_budget, model_bytes
from tests.sae_store_tiny import save_tiny_lm


@pytest.fixture
def cache(monkeypatch):
    """A fresh cache for the test (the process-wide one keeps serving the other tests)."""
    fresh = ModelCache()
    monkeypatch.setattr(loading, "CACHE", fresh)
    return fresh


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return [save_tiny_lm(root / f"tiny{i}", seed=i) for i in range(3)]


def test_every_spelling_of_one_folder_shares_one_copy(cache, folders, monkeypatch, tmp_path):
    folder = folders[0]
    link = tmp_path / "link"
    link.symlink_to(folder)
    monkeypatch.chdir(folder.parent)
    spellings = [str(folder), str(folder) + "/", f"./{folder.name}", f"../{folder.parent.name}/{folder.name}",
                 str(link)]
    copies = [loading.load_model(s, device="cpu") for s in spellings]
    assert all(c is copies[0] for c in copies)
    assert len(cache.entries()) == 1
    assert cache.entries()[0]["key"] == (os.path.realpath(folder), "cpu", "torch.float32")
    assert copies[0].name == os.path.realpath(folder)


def test_dtype_and_device_are_part_of_the_key(cache, folders):
    f32 = loading.load_model(str(folders[0]), device="cpu", dtype="float32")
    f64 = loading.load_model(str(folders[0]), device="cpu", dtype="float64")
    assert f32 is not f64 and f64.dtype == torch.float64
    assert len(cache.entries()) == 2


def test_loaded_weights_do_not_require_grad(cache, folders):
    lm = loading.load_model(str(folders[1]), device="cpu")
    assert not any(p.requires_grad for p in lm.model.parameters())


def test_least_recently_used_models_go_first_under_the_budget(cache, folders, monkeypatch):
    one = model_bytes(loading.load_model(str(folders[0]), device="cpu").model)
    monkeypatch.setenv(MEMORY_ENV, str(2.5 * one / 2**20))
    loading.load_model(str(folders[1]), device="cpu")
    loading.load_model(str(folders[0]), device="cpu")  # touched again: now the most recent
    loading.load_model(str(folders[2]), device="cpu")
    names = [os.path.basename(e["key"][0]) for e in cache.entries()]
    assert names == ["tiny0", "tiny2"]
    assert [os.path.basename(k[0]) for k in cache.evicted] == ["tiny1"]
    assert sum(e["bytes"] for e in cache.entries()) <= memory_budget()


def test_a_model_in_use_is_never_evicted(cache, folders, monkeypatch):
    first = loading.load_model(str(folders[0]), device="cpu")
    one = model_bytes(first.model)
    monkeypatch.setenv(MEMORY_ENV, str(1.5 * one / 2**20))
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with model_lock(first):
            held.set()
            release.wait(30)

    worker = threading.Thread(target=hold_the_lock)
    worker.start()
    held.wait(30)
    try:
        loading.load_model(str(folders[1]), device="cpu")
        assert any(e["key"][0] == os.path.realpath(folders[0]) for e in cache.entries())
    finally:
        release.set()
        worker.join()
    with loading.using(loading.load_model(str(folders[1]), device="cpu")):
        loading.load_model(str(folders[2]), device="cpu")
        kept = [os.path.basename(e["key"][0]) for e in cache.entries()]
    assert "tiny1" in kept and "tiny2" in kept and "tiny0" not in kept


def test_estimate_from_safetensors_headers_matches_the_loaded_size(cache, folders):
    lm = loading.load_model(str(folders[0]), device="cpu", dtype="float64")
    estimate = estimate_bytes(str(folders[0]), torch.float64)
    assert estimate is not None and abs(estimate - model_bytes(lm.model)) <= 0.05 * estimate


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_budget_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(MEMORY_ENV, value)
    with pytest.raises(InterpscopeError, match=MEMORY_ENV):
        memory_budget()


def test_concurrent_loads_of_one_model_make_one_copy(cache, folders):
    results = []
    threads = [threading.Thread(target=lambda: results.append(loading.load_model(str(folders[2]), device="cpu")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(r is results[0] for r in results)
    assert len(cache.entries()) == 1


@pytest.mark.bundled
def test_the_bundled_name_and_its_folder_are_one_copy(cache):
    from interpscope.models import smollm2

    by_name = loading.load_model("smollm2-135m", device="cpu")
    by_folder = loading.load_model(str(smollm2.cache_dir()) + "/", device="cpu")
    assert by_name is by_folder and by_folder.name == "smollm2-135m"
    assert len(cache.entries()) == 1
