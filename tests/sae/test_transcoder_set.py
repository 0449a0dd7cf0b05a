"""Per-layer transcoder sets (interpscope.sae.transcoder_set) and their training script (scripts/train_transcoders.py):
the folder round-trips, bad folders are refused by name, the cache records every layer from one forward pass per
batch and resumes, and the shipped SmolLM2 set is complete and fits the bundled model."""
from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from interpscope.capture import capture, model_lock
from interpscope.config import REPO_ROOT, InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.sae.transcoder_set import (
    MANIFEST,
    default_transcoder_set,
    layer_folder_name,
    load_transcoder_set,
    new_transcoder,
    random_transcoder_set,
    save_transcoder_set,
)
from interpscope.sinks import sink_rows
from tests.sae_store_tiny import tiny_lm


def _script():
    if "train_transcoders_script" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_transcoders_script",
                                                      REPO_ROOT / "scripts" / "train_transcoders.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses resolve their module by name
        spec.loader.exec_module(module)
    return sys.modules["train_transcoders_script"]


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def _inputs(d: int) -> torch.Tensor:
    return torch.randn(7, d, generator=torch.Generator().manual_seed(5))


def test_a_set_round_trips_through_its_folder(lm, tmp_path):
    tset = random_transcoder_set(lm, width=16, seed=1)
    save_transcoder_set(tset, tmp_path / "set", dtype="float32", manifest={"layers": [{"layer": 0}, {"layer": 1}]})
    loaded = load_transcoder_set(tmp_path / "set", lm=lm)
    assert loaded.n_layers == lm.adapter.n_layers == 2 and loaded.width == 16
    assert loaded.hook_in_name(1) == "blocks.1.mlp.hook_in" and loaded.hook_out_name(1) == "blocks.1.hook_mlp_out"
    x = _inputs(lm.adapter.d_model)
    for layer in range(2):
        assert torch.equal(loaded[layer](x), tset[layer](x))
        assert torch.equal(loaded[layer].encode(x), tset[layer].encode(x))
    assert loaded.manifest["layers"] == [{"layer": 0}, {"layer": 1}] and loaded.manifest["n_layers"] == 2
    save_transcoder_set(tset, tmp_path / "half", dtype="float16")
    half = load_transcoder_set(tmp_path / "half")
    assert torch.allclose(half[0](x), tset[0](x), atol=2e-2) and not torch.equal(half[0].W_enc, tset[0].W_enc)


def _saved(lm, tmp_path: Path) -> Path:
    return save_transcoder_set(random_transcoder_set(lm, width=16), tmp_path / "set", dtype="float32")


def test_a_missing_layer_is_refused_by_name(lm, tmp_path):
    folder = _saved(lm, tmp_path)
    shutil.rmtree(folder / layer_folder_name(1))
    with pytest.raises(InterpscopeError, match=r"lacks layer 1 \(layer_01/\)"):
        load_transcoder_set(folder)


def test_a_pickle_is_refused(lm, tmp_path):
    folder = _saved(lm, tmp_path)
    layer = folder / layer_folder_name(0)
    (layer / "sae_weights.safetensors").unlink()
    torch.save({"W_enc": torch.zeros(2)}, layer / "weights.pt")
    with pytest.raises(InterpscopeError, match=r"Layer 0 .*weights\.pt is a pickle"):
        load_transcoder_set(folder)
    with pytest.raises(InterpscopeError, match="pickle"):
        load_transcoder_set(layer / "weights.pt")
    (folder / MANIFEST).unlink()
    torch.save({}, folder / "set.pkl")
    with pytest.raises(InterpscopeError, match=r"needs manifest\.json.*set\.pkl, a pickle"):
        load_transcoder_set(folder)


def test_a_layer_of_another_width_or_hook_is_refused(lm, tmp_path):
    folder = _saved(lm, tmp_path)
    from interpscope.sae.folder import save_sae

    save_sae(new_transcoder(lm, 1, width=24), folder / layer_folder_name(1))
    with pytest.raises(InterpscopeError, match="Layer 1 .*width 24, but the manifest says 16"):
        load_transcoder_set(folder)
    save_sae(new_transcoder(lm, 0, width=16), folder / layer_folder_name(1))  # layer 0's hooks in layer 1's place
    with pytest.raises(InterpscopeError, match="Layer 1 .*'blocks.0.mlp.hook_in'.*expects 'blocks.1.mlp.hook_in'"):
        load_transcoder_set(folder)


def test_a_set_for_another_model_is_refused(lm, tmp_path):
    folder = _saved(lm, tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["n_layers"] = 1
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InterpscopeError, match="1 layers but tiny-gpt2 has 2 blocks"):
        load_transcoder_set(folder, lm=lm)


class _CountingForward:
    """Counts the model's forward passes (the model's own forward, wrapped; hooks still fire)."""

    def __init__(self, model, fail_after: int | None = None):
        self.forward, self.calls, self.fail_after = model.forward, 0, fail_after

    def __call__(self, *args, **kwargs):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        return self.forward(*args, **kwargs)


def _expected_rows(lm, windows: torch.Tensor, layer: int) -> np.ndarray:
    """What capture() records at the layer's hook pair, positions 1.., sink rows out, batch by batch of 8."""
    names = [f"blocks.{layer}.mlp.hook_in", f"blocks.{layer}.hook_mlp_out"]
    parts = []
    for first in range(0, windows.shape[0], 8):
        with model_lock(lm):
            acts = capture(lm.adapter, windows[first:first + 8], names).activations
        x_in, y = (acts[name][:, 1:].reshape(-1, lm.adapter.d_model) for name in names)
        parts.append(torch.cat([x_in, y], -1)[~(sink_rows(x_in) | sink_rows(y))])
    return torch.cat(parts).numpy()


def test_the_cache_records_every_layer_in_one_pass_per_batch_and_resumes(lm, tmp_path, monkeypatch):
    script = _script()
    n_tokens, context = 2048, 64
    windows = token_chunks(lm.tokenizer, context, n_tokens, split="train")
    n_batches = -(-windows.shape[0] // 8)
    counter = _CountingForward(lm.model, fail_after=2)
    monkeypatch.setattr(lm.model, "forward", counter)
    with pytest.raises(KeyboardInterrupt):
        script.cache_all_layers(lm, tmp_path, n_tokens, context_size=context)
    assert counter.calls == 2
    counter.fail_after, counter.calls = None, 0
    caches = script.cache_all_layers(lm, tmp_path, n_tokens, context_size=context)
    assert counter.calls == n_batches - 2  # resumed after the two finished batches; one pass per batch, all layers
    assert len(caches) == lm.adapter.n_layers
    for layer, cache in enumerate(caches):
        expected = _expected_rows(lm, windows, layer)
        assert cache.array.shape == expected.shape and cache.array.dtype == np.float16
        np.testing.assert_allclose(np.asarray(cache.array, dtype=np.float32), expected, rtol=1e-2, atol=1e-2)
    counter.calls = 0
    again = script.cache_all_layers(lm, tmp_path, n_tokens, context_size=context)
    assert counter.calls == 0 and [c.n_rows for c in again] == [c.n_rows for c in caches]


def test_training_folds_its_scales_back_and_a_finished_layer_is_not_retrained(lm, tmp_path, monkeypatch):
    script = _script()
    caches = script.cache_all_layers(lm, tmp_path, 2048, context_size=64)
    settings = script.TrainSettings(width=32, l1=0.1, steps_tokens=20480, batch_size=512)
    trained = script.train_all(lm, caches, tmp_path, settings)
    rows = torch.from_numpy(np.asarray(caches[1].array[:256], dtype=np.float32))
    x, y = rows[:, :32], rows[:, 32:]
    with torch.no_grad():
        fvu = float((trained[1](x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    assert fvu < 1.0  # it maps raw activations (trained on y scaled ~150x here: unfolded, FVU would be huge)
    summary = json.loads((tmp_path / "trained" / "layer_01" / "summary.json").read_text())
    assert summary["scale_in"] > 0 and summary["scale_out"] > 0

    def refuse(*args, **kwargs):
        raise AssertionError("a finished layer was retrained")
    monkeypatch.setattr(script, "train_layer", refuse)
    again = script.train_all(lm, caches, tmp_path, settings)
    assert torch.equal(again[1](x), trained[1](x))


def test_unscale_maps_raw_activations_like_the_scaled_transcoder(lm):
    script = _script()
    tc = random_transcoder_set(lm, width=16, seed=4)[0]
    x = _inputs(32)
    s_in, s_out = 3.0, 0.25
    scaled_prediction = tc(x * s_in)
    script.unscale(tc, s_in, s_out)
    assert torch.allclose(tc(x), scaled_prediction / s_out, atol=1e-5)


def test_the_shipped_smollm2_set_is_complete_and_fits_the_bundled_model():
    folder = default_transcoder_set("smollm2-135m")
    assert folder is not None, "assets/transcoders/smollm2-135m/manifest.json is missing"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [row["layer"] for row in manifest["layers"]] == list(range(30))
    for row in manifest["layers"]:
        assert math.isfinite(row["fvu"]) and math.isfinite(row["loss_recovered"]) and row["l0"] > 0
    assert manifest["command"].startswith("scripts/train_transcoders.sh")
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    assert size <= 56e6
    from interpscope.models import load_model

    smol = load_model("smollm2-135m", device="cpu")
    tset = load_transcoder_set(folder, lm=smol)  # checks the widths against the adapter's hooks
    assert tset.n_layers == smol.adapter.n_layers == 30 and tset.width == manifest["width"]
    layer = 15
    ids = token_chunks(smol.tokenizer, 32, 64, split="test")[:1]
    with model_lock(smol):
        acts = capture(smol.adapter, ids, [tset.hook_in_name(layer), tset.hook_out_name(layer)]).activations
    x, y = acts[tset.hook_in_name(layer)][1:], acts[tset.hook_out_name(layer)][1:]
    keep = ~(sink_rows(x) | sink_rows(y))
    x, y = x[keep], y[keep]
    with torch.no_grad():
        fvu = float((tset[layer](x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    assert fvu < 1.0 and fvu < 3 * manifest["layers"][layer]["fvu"] + 0.1


# --- server mode: the set folder is confined like every other path (issue: 0 of 31 hostile values were refused) -----
def _hostile_values(outside: Path) -> list[str]:
    """Paths a visitor of a shared server might type into the set-folder box (or a link's folder=): system files and
    folders, home-relative, traversal out of an allowed root, a real set folder outside the roots, odd bytes."""
    from interpscope.config import ASSETS_DIR

    system = ["/etc", "/etc/passwd", "/etc/shadow", "/proc/self/environ", "/proc/self/cwd", "/root", "/",
              "/dev/null", "/sys", "/var/log", "/tmp", "/nonexistent", "/nonexistent/manifest.json", "~",
              "~/.bashrc", "~/.ssh", "~root", "..", "../..", "../../etc", "/etc/../etc", "//etc",
              "/etc/./passwd", "/proc/1/root", str(ASSETS_DIR / ".." / ".." / ".." / "etc"),
              str(ASSETS_DIR) + "/../../../../../../etc/passwd", "/usr/lib/python3/dist-packages",
              "/home", "/var", "\\\\server\\share"]
    return system + [str(outside), str(outside / "pytorch_model.bin"), str(outside / MANIFEST)]


def test_server_mode_refuses_every_hostile_set_folder_with_one_message(monkeypatch, tmp_path):
    outside = tmp_path / "outside"
    save_transcoder_set(random_transcoder_set(tiny_lm(), 8, seed=0), outside)
    (outside / "pytorch_model.bin").write_bytes(b"not really")
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    messages = set()
    values = _hostile_values(outside)
    assert len(values) >= 31
    for value in values:
        with pytest.raises(InterpscopeError) as refused:
            load_transcoder_set(value)
        messages.add(str(refused.value))
    assert len(messages) == 1, messages  # whether or not the path exists, is a folder, holds a set or a pickle
    (message,) = messages
    assert "allowed folders" in message and "/etc" not in message and str(tmp_path) not in message


def test_server_mode_refuses_a_set_whose_manifest_leads_outside(monkeypatch, tmp_path):
    """A set inside the data directory whose manifest.json is a symlink to a file outside it: refused before the
    manifest is opened (it used to run a full graph)."""
    data = tmp_path / "data"
    inside, outside = data / "sets" / "mine", tmp_path / "outside"
    save_transcoder_set(random_transcoder_set(tiny_lm(), 8, seed=0), inside)
    outside.mkdir()
    (inside / MANIFEST).rename(outside / MANIFEST)
    (inside / MANIFEST).symlink_to(outside / MANIFEST)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)
    assert load_transcoder_set(inside).n_layers == tiny_lm().adapter.n_layers  # a local user may link anywhere
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    with pytest.raises(InterpscopeError, match="leads outside them"):
        load_transcoder_set(inside)
    (inside / MANIFEST).unlink()
    shutil.copy(outside / MANIFEST, inside / MANIFEST)
    assert load_transcoder_set(inside).n_layers == tiny_lm().adapter.n_layers  # the same set, not linked: loads


def test_a_set_inside_the_roots_is_named_relative_in_its_errors(monkeypatch, tmp_path):
    data = tmp_path / "data"
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data))
    (data / "empty").mkdir(parents=True)
    with pytest.raises(InterpscopeError) as refused:
        load_transcoder_set(data / "empty")
    assert "[data dir]/empty is not a transcoder set" in str(refused.value) and str(data) not in str(refused.value)


def test_a_hook_template_with_another_placeholder_is_refused(tmp_path):
    save_transcoder_set(random_transcoder_set(tiny_lm(), 8, seed=0), tmp_path / "set")
    manifest = json.loads((tmp_path / "set" / MANIFEST).read_text())
    for template in ("blocks.{}.mlp.hook_in", "blocks.{0}.mlp.hook_in", "blocks.{layer.x}.mlp.hook_in",
                     "blocks.{name}.mlp.hook_in", "blocks.{layer"):
        (tmp_path / "set" / MANIFEST).write_text(json.dumps({**manifest, "hook_in": template}))
        with pytest.raises(InterpscopeError, match="must name its layer as"):
            load_transcoder_set(tmp_path / "set")
