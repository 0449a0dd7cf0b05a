"""Released dictionaries in their publishers' layouts (synthesised here, exactly as published, inside a Hugging Face
cache): Gemma Scope 2 SAEs and transcoders (plain and affine) load by RELEASE/SAE_ID offline and compute what the
published formula says from the raw tensors; hooks map onto the adapters' hook points (checked against the
Hugging Face modules they name, sandwich norms included); an identity-like SAE in that layout evaluates at FVU 0
on a tiny Gemma 3; Gemma Scope 1 npz; and bad input (unknown release or id, not cached offline, another model,
pickles, missing or inconsistent tensors) is refused with a clear message."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.sae import load_sae
from interpscope.sae.arch.jumprelu import JumpReLUSAE
from interpscope.sae.arch.jumprelu_transcoder import JumpReLUTranscoder
from interpscope.sae.formats import Source, detect_format
from interpscope.sae.formats.gemma_scope import HF_TO_HOOK
from interpscope.sae.releases import find, listing, resolve
from tests.released import (
    REVISION,
    gemma_scope_2_tensors,
    identity_tensors,
    write_gemma_scope_1,
    write_gemma_scope_2,
)

RES = "gemma-scope-2-270m-pt-res/layer_12_width_16k_l0_medium"
AFFINE = "gemma-scope-2-270m-pt-transcoders-all/layer_3_width_16k_l0_small_affine"
PLAIN = "gemma-scope-2-270m-pt-transcoders-all/layer_3_width_16k_l0_small"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return folder


def _jumprelu(x, t):
    z = x @ t["w_enc"] + t["b_enc"]
    return torch.where(z > t["threshold"], z, torch.zeros_like(z))


def test_a_resid_sae_loads_by_release_name_offline_and_computes_the_published_formula(cache):
    tensors = gemma_scope_2_tensors(d_in=10, d_sae=24, seed=1)
    write_gemma_scope_2(cache, "resid_post/layer_12_width_16k_l0_medium", tensors)
    folder = resolve(RES)
    sae = load_sae(folder)
    assert isinstance(sae, JumpReLUSAE)
    assert sae.cfg.hook_name == "blocks.12.hook_resid_post" and sae.cfg.model_name == "gemma3-270m"
    stamp = sae.cfg.extra["release"]
    assert stamp["name"] == RES and stamp["revision"] == REVISION and stamp["repo_id"] == "google/gemma-scope-2-270m-pt"
    x = torch.randn(50, 10, generator=torch.Generator().manual_seed(2))
    f = _jumprelu(x, tensors)
    assert 0 < int((f > 0).sum()) < f.numel()
    assert torch.allclose(sae.encode(x), f, atol=1e-6)
    assert torch.allclose(sae(x), f @ tensors["w_dec"] + tensors["b_dec"], atol=1e-5)
    weights = folder / "sae_weights.safetensors"
    before = weights.stat().st_mtime_ns
    assert resolve(RES) == folder and weights.stat().st_mtime_ns == before  # converted once, then reused


@pytest.mark.parametrize("spec, affine", [(AFFINE, True), (PLAIN, False)])
def test_transcoders_map_the_sandwich_norms_and_the_affine_skip(cache, spec, affine):
    tensors = gemma_scope_2_tensors(d_in=8, d_sae=20, d_out=6, affine=affine, seed=3)  # d_in != d_out: orientation
    path = find(spec).path
    write_gemma_scope_2(cache, path, tensors)
    tc = load_sae(resolve(spec))
    assert isinstance(tc, JumpReLUTranscoder) and tc.skip is affine
    assert (tc.cfg.hook_name, tc.hook_name_out) == ("blocks.3.mlp.hook_in", "blocks.3.hook_mlp_out")
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(4))
    f = _jumprelu(x, tensors)
    expected = f @ tensors["w_dec"] + tensors["b_dec"]
    if affine:
        expected = expected + x @ tensors["affine_skip_connection"]
    assert torch.allclose(tc.encode(x), f, atol=1e-6)
    assert torch.allclose(tc(x), expected, atol=1e-5)


def test_config_json_names_the_hooks_and_must_agree_with_the_tensors(cache):
    tensors = gemma_scope_2_tensors(d_in=8, d_sae=16, seed=5)
    config = {"architecture": "jump_relu", "model_name": "gemma-v3-270m-pt",
              "hf_hook_point_in": "model.layers.4.post_attention_layernorm.output"}
    folder = write_gemma_scope_2(cache, "misc/layer_4_custom", tensors, config=config)
    sae = load_sae(folder)  # a folder in the released layout opens directly too
    assert sae.cfg.hook_name == "blocks.4.hook_attn_out" and sae.cfg.model_name == "gemma3-270m"
    config.update(hf_hook_point_out="model.layers.4.post_feedforward_layernorm.output", affine_connection=True)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InterpscopeError, match="affine_connection is True but params.safetensors lacks"):
        load_sae(folder)
    config["hf_hook_point_in"] = "model.layers.4.mlp.down_proj.output"
    config.pop("affine_connection")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InterpscopeError, match="not one Interpscope maps"):
        load_sae(folder)


def test_broken_released_folders_are_refused_by_name(cache):
    tensors = gemma_scope_2_tensors(d_in=8, d_sae=16, seed=6)
    folder = write_gemma_scope_2(cache, "resid_post/layer_2_width_16k_l0_small",
                                 {k: v for k, v in tensors.items() if k != "threshold"})
    with pytest.raises(InterpscopeError, match="lacks threshold"):
        load_sae(folder)
    folder = write_gemma_scope_2(cache, "resid_post/layer_2_width_16k_l0_big", {**tensors, "b_dec": torch.zeros(5)})
    with pytest.raises(InterpscopeError, match="b_dec has shape"):
        load_sae(folder)
    folder = write_gemma_scope_2(cache, "resid_post/layer_2_width_16k_l0_medium", {
        **tensors, "threshold": torch.full((16,), float("nan"))})
    with pytest.raises(InterpscopeError, match="NaN"):
        load_sae(folder)
    folder = write_gemma_scope_2(cache, "resid_post/layer_2_width_65k_l0_big", {
        **tensors, "affine_skip_connection": torch.zeros(8, 8)})
    with pytest.raises(InterpscopeError, match="only transcoders"):
        load_sae(folder)


def test_unknown_release_unknown_id_uncached_and_another_model_are_refused(cache):
    with pytest.raises(InterpscopeError, match="Unknown release 'gemma-scope-9'"):
        resolve("gemma-scope-9/layer_1")
    with pytest.raises(InterpscopeError, match="has no SAE 'layer_12_width_3k'.*Close: layer_12_width"):
        resolve("gemma-scope-2-270m-pt-res/layer_12_width_3k")
    with pytest.raises(InterpscopeError, match="not in the Hugging Face cache.*HF_HUB_OFFLINE is set"):
        resolve(RES)
    write_gemma_scope_2(cache, find(RES).path, gemma_scope_2_tensors(d_in=8, d_sae=16))
    with pytest.raises(InterpscopeError, match=r"trained on google/gemma-3-270m \(gemma3-270m\).*smollm2-135m"):
        resolve(RES, model_name="smollm2-135m")
    assert resolve(RES, model_name="google/gemma-3-270m").is_dir()


def test_the_listing_says_what_is_cached(cache):
    write_gemma_scope_2(cache, find(RES).path, gemma_scope_2_tensors(d_in=8, d_sae=16))
    rows = listing("gemma3-270m")
    assert {row["release"] for row in rows} >= {"gemma-scope-2-270m-pt-res", "gemma-scope-2-270m-pt-transcoders-all"}
    cached = [row["name"] for row in rows if row["cached"]]
    assert cached == [RES]
    assert listing("smollm2-135m") == []
    row = next(row for row in rows if row["name"] == AFFINE)
    assert row["kind"] == "transcoder (affine)" and row["width"] == 16384 and row["hook_out"] == "blocks.3.hook_mlp_out"


def test_source_is_read_from_the_cache_path(tmp_path):
    folder = tmp_path / "models--google--gemma-scope-2-270m-pt" / "snapshots" / "abc" / "transcoder_all" / "layer_1_x"
    assert Source.of(folder) == Source("google/gemma-scope-2-270m-pt", "transcoder_all/layer_1_x", "abc")
    assert Source.of(tmp_path / "layer_1_x") == Source("", "layer_1_x", "")


def test_gemma_scope_1_npz_loads_and_pickles_are_refused(cache):
    gen = np.random.default_rng(0)
    arrays = {"W_enc": gen.normal(size=(8, 12)).astype(np.float32), "W_dec": gen.normal(size=(12, 8)).astype(
        np.float32), "b_enc": gen.normal(size=12).astype(np.float32), "b_dec": gen.normal(size=8).astype(np.float32),
        "threshold": np.abs(gen.normal(size=12)).astype(np.float32)}
    folder = write_gemma_scope_1(cache, "layer_5/width_16k/average_l0_71", arrays)
    assert detect_format(folder).name == "gemma_scope_1"
    sae = load_sae(folder)
    assert sae.cfg.hook_name == "blocks.5.hook_resid_post" and sae.cfg.model_name == "google/gemma-2-2b"
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(1))
    t = {k.lower(): torch.from_numpy(v) for k, v in arrays.items()}
    assert torch.allclose(sae.encode(x), _jumprelu(x, t), atol=1e-5)
    embedding = write_gemma_scope_1(cache, "embedding/width_4k/average_l0_6", arrays)
    emb = load_sae(embedding)
    assert emb.cfg.hook_name == "hook_embed"
    assert torch.allclose(emb.W_enc, torch.from_numpy(arrays["W_enc"]) / 8 ** 0.5)
    np.savez(folder / "params.npz", **{**arrays, "threshold": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(InterpscopeError, match="refuses pickles"):
        load_sae(folder)


def test_hook_names_are_the_modules_gemma_scope_names(tmp_path):
    """Each Hugging Face module path Gemma Scope names (model.layers.L.<module>.output/.input) is captured at the
    adapter hook point it maps to: the same tensor, on a tiny Gemma 3 with its sandwich norms (and the heads'
    outputs o_proj reads, where attn_out SAEs read)."""
    from interpscope.capture import capture
    from interpscope.sae.formats.gemma_scope import hook_name
    from tests.tiny import loaded as wrap_loaded
    from tests.tiny import tiny_gemma3

    torch.set_num_threads(1)
    lm = wrap_loaded(tiny_gemma3(), None, name="tiny-gemma3")
    ids = torch.randint(3, 60, (1, 7), generator=torch.Generator().manual_seed(0))
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for point in HF_TO_HOOK:
        module_path, side = point.rsplit(".", 1) if "." in point else ("", point)
        module = lm.model.get_submodule(f"model.layers.1.{module_path}".rstrip("."))

        def grab(mod, args, out, point=point, side=side):
            seen[point] = (args[0] if side == "input" else out[0] if isinstance(out, tuple) else out).detach()
        handles.append(module.register_forward_hook(grab))
    names = {point: hook_name(f"model.layers.1.{point}") for point in HF_TO_HOOK}
    captured = capture(lm.adapter, ids, list(names.values())).activations
    for handle in handles:
        handle.remove()
    for point, name in names.items():
        got, want = captured[name].double().reshape(-1), seen[point].double().reshape(-1)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-6), (point, name)


def test_an_identity_like_sae_in_the_published_layout_evaluates_at_fvu_zero(cache):
    from interpscope.sae.evaluation import evaluate_sae
    from tests.tiny import loaded as wrap_loaded
    from tests.tiny import tiny_gemma3

    torch.set_num_threads(1)
    lm = wrap_loaded(tiny_gemma3(), None, name="tiny-gemma3")
    ids = torch.randint(3, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    heads = lm.adapter.attention_out_proj(1).in_features
    for path, hook, width in (("resid_post/layer_1_width_16k_l0_small", "blocks.1.hook_resid_post", lm.adapter.d_model),
                              ("mlp_out/layer_0_width_16k_l0_small", "blocks.0.hook_mlp_out", lm.adapter.d_model),
                              ("attn_out/layer_1_width_16k_l0_small", "blocks.1.attn.hook_z", heads)):
        folder = write_gemma_scope_2(cache, path, identity_tensors(width))
        sae = load_sae(folder)
        assert sae.cfg.hook_name == hook
        report = evaluate_sae(lm, sae, ids=ids, batch_size=4)
        assert report.fvu < 1e-8 and report.loss_recovered == pytest.approx(1.0, abs=1e-6)
        assert report.l0 > 0


def test_llama_scope_folders_fold_the_input_scale_as_saelens_does(tmp_path):
    """lm-saes / Llama Scope: the SAE was trained on s x with s = sqrt(d) / average norm; read as SAELens reads it
    (W_enc s, W_dec / s, b_dec / s, the one threshold times s), raw activations give the features computed on s x
    and the reconstruction scaled back by 1 / s."""
    from safetensors.torch import save_file

    d, width, s_norm = 8, 20, 2.0
    folder = tmp_path / "Llama3_1-8B-Base-L5M-8x"
    (folder / "checkpoints").mkdir(parents=True)
    gen = torch.Generator().manual_seed(3)
    raw = {"encoder.weight": torch.randn(width, d, generator=gen), "encoder.bias": torch.randn(width, generator=gen),
           "decoder.weight": torch.randn(d, width, generator=gen), "decoder.bias": torch.randn(d, generator=gen)}
    save_file(raw, str(folder / "checkpoints" / "final.safetensors"))
    hyper = {"d_model": d, "d_sae": width, "hook_point_in": "blocks.5.hook_mlp_out", "hook_point_out":
             "blocks.5.hook_mlp_out", "jump_relu_threshold": 0.5,
             "dataset_average_activation_norm": {"in": s_norm, "out": s_norm}}
    (folder / "hyperparams.json").write_text(json.dumps(hyper))
    sae = load_sae(folder)
    assert isinstance(sae, JumpReLUSAE) and sae.cfg.hook_name == "blocks.5.hook_mlp_out"
    assert sae.cfg.model_name == "meta-llama/Llama-3.1-8B"
    s = d ** 0.5 / s_norm
    x = torch.randn(30, d, generator=torch.Generator().manual_seed(4))
    z = (s * x) @ raw["encoder.weight"].T + raw["encoder.bias"]
    f = torch.where(z > 0.5 * s, z, torch.zeros_like(z))
    assert 0 < int((f > 0).sum()) < f.numel()
    assert torch.allclose(sae.encode(x), f, atol=1e-5)
    assert torch.allclose(sae(x), (f @ raw["decoder.weight"].T + raw["decoder.bias"]) / s, atol=1e-5)
    del hyper["dataset_average_activation_norm"]
    (folder / "hyperparams.json").write_text(json.dumps(hyper))
    with pytest.raises(InterpscopeError, match="lacks dataset_average_activation_norm"):
        load_sae(folder)
