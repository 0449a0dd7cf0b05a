"""The common SAE folder format: bit-identical round trip, folders in the common library's layout (both its older
top-level fields and its newer `metadata` object), pickle refusal, and explained shape mismatches."""
from __future__ import annotations

import json
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from interpscope.adapters import get_adapter
from interpscope.config import InterpscopeError
from interpscope.sae import SAEConfig, build_sae, check_compatible, load_sae, save_sae
from tests.tiny import tiny_llama


def _random_sae(arch: str, d_in: int = 32, d_sae: int = 96, **kwargs):
    sae = build_sae(SAEConfig(d_in=d_in, d_sae=d_sae, architecture=arch, model_name="tiny",
                              hook_name="blocks.1.hook_resid_post", hook_layer=1, **kwargs))
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for param in sae.parameters():
            param.copy_(torch.randn(param.shape, generator=gen))
    return sae


@pytest.mark.parametrize("arch,kwargs", [("relu", {}), ("gated", {}), ("topk", {"k": 8}), ("jumprelu", {})])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_trip_is_bit_identical(tmp_path, arch, kwargs, dtype):
    sae = _random_sae(arch, **kwargs)
    first = save_sae(sae, tmp_path / "a", dtype=dtype)
    loaded = load_sae(first, dtype=None)
    second = save_sae(loaded, tmp_path / "b")
    a, b = load_file(str(first / "sae_weights.safetensors")), load_file(str(second / "sae_weights.safetensors"))
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype == getattr(torch, dtype)
        assert torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)), name
    assert json.loads((first / "cfg.json").read_text()) == json.loads((second / "cfg.json").read_text())
    assert loaded.cfg.architecture == sae.cfg.architecture and loaded.cfg.k == sae.cfg.k
    x = torch.randn(5, 32)
    expected = load_sae(first)(x)
    torch.testing.assert_close(load_sae(second)(x), expected, rtol=0, atol=0)


def test_cfg_json_uses_the_common_field_names(tmp_path):
    folder = save_sae(_random_sae("gated"), tmp_path / "g")
    cfg = json.loads((folder / "cfg.json").read_text())
    for key in ("d_in", "d_sae", "architecture", "dtype", "hook_name", "hook_layer", "model_name",
                "apply_b_dec_to_input", "normalize_activations", "context_size"):
        assert key in cfg, key
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post"
    assert set(load_file(str(folder / "sae_weights.safetensors"))) == {"W_enc", "W_dec", "b_dec", "b_gate",
                                                                       "r_mag", "b_mag"}


def _write_library_folder(folder, cfg: dict, tensors: dict) -> None:
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "sae_weights.safetensors"))


def test_hand_written_legacy_library_folder_loads(tmp_path):
    """Older releases: model_name / hook_name / hook_layer at the top level, no 'architecture' field."""
    d_in, d_sae = 8, 20
    gen = torch.Generator().manual_seed(0)
    W_enc, W_dec = torch.randn(d_in, d_sae, generator=gen), torch.randn(d_sae, d_in, generator=gen)
    b_enc, b_dec = torch.randn(d_sae, generator=gen), torch.randn(d_in, generator=gen)
    cfg = {"d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu", "model_name": "gpt2-small",
           "hook_name": "blocks.8.hook_resid_pre", "hook_layer": 8, "hook_head_index": None,
           "activation_fn_str": "relu", "apply_b_dec_to_input": True, "finetuning_scaling_factor": False,
           "context_size": 128, "dataset_path": "Skylion007/openwebtext", "prepend_bos": True,
           "normalize_activations": "none", "sae_lens_training_version": "3.0.0"}
    _write_library_folder(tmp_path / "legacy", cfg, {"W_enc": W_enc, "W_dec": W_dec, "b_enc": b_enc,
                                                     "b_dec": b_dec})
    sae = load_sae(tmp_path / "legacy")
    assert sae.cfg.architecture == "standard" and sae.cfg.hook_name == "blocks.8.hook_resid_pre"
    assert sae.cfg.hook_layer == 8 and sae.cfg.model_name == "gpt2-small"
    x = torch.randn(4, d_in, generator=gen)
    expected = torch.relu((x - b_dec) @ W_enc + b_enc) @ W_dec + b_dec
    torch.testing.assert_close(sae(x), expected)


def test_hand_written_new_layout_jumprelu_folder_loads(tmp_path):
    """Newer releases: 'architecture' at the top, where-it-reads fields inside 'metadata'."""
    d_in, d_sae = 8, 20
    gen = torch.Generator().manual_seed(1)
    tensors = {"W_enc": torch.randn(d_in, d_sae, generator=gen), "W_dec": torch.randn(d_sae, d_in, generator=gen),
               "b_enc": torch.randn(d_sae, generator=gen), "b_dec": torch.randn(d_in, generator=gen),
               "threshold": torch.rand(d_sae, generator=gen)}
    cfg = {"architecture": "jumprelu", "d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
           "metadata": {"model_name": "gemma-2-2b", "hook_name": "blocks.12.hook_resid_post",
                        "context_size": 1024, "prepend_bos": True, "sae_lens_version": "6.0.0"}}
    _write_library_folder(tmp_path / "jr", cfg, tensors)
    sae = load_sae(tmp_path / "jr" / "cfg.json")
    assert sae.cfg.architecture == "jumprelu" and sae.cfg.hook_layer == 12
    assert sae.cfg.hook_name == "blocks.12.hook_resid_post" and not sae.cfg.apply_b_dec_to_input
    x = torch.randn(6, d_in, generator=gen)
    z = x @ tensors["W_enc"] + tensors["b_enc"]
    expected = (z * (z > tensors["threshold"])) @ tensors["W_dec"] + tensors["b_dec"]
    torch.testing.assert_close(sae(x), expected)


def test_pickle_checkpoints_are_refused(tmp_path):
    payload = tmp_path / "sae.pt"
    payload.write_bytes(pickle.dumps({"W_enc": [[1.0]]}))
    with pytest.raises(InterpscopeError, match="pickle"):
        load_sae(payload)
    folder = tmp_path / "only_pickle"
    folder.mkdir()
    (folder / "sae_weights.pt").write_bytes(pickle.dumps({"W_enc": [[1.0]]}))
    (folder / "cfg.json").write_text(json.dumps({"d_in": 1, "d_sae": 1}))
    with pytest.raises(InterpscopeError, match="pickle"):
        load_sae(folder)


def test_missing_and_misshapen_tensors_are_explained(tmp_path):
    sae = _random_sae("relu")
    folder = save_sae(sae, tmp_path / "s")
    tensors = load_file(str(folder / "sae_weights.safetensors"))
    tensors["W_dec"] = tensors["W_dec"][:, :10].contiguous()
    save_file(tensors, str(folder / "sae_weights.safetensors"))
    with pytest.raises(InterpscopeError, match=r"W_dec has shape \(96, 10\).*implies \(96, 32\)"):
        load_sae(folder)
    del tensors["b_enc"]
    save_file(tensors, str(folder / "sae_weights.safetensors"))
    with pytest.raises(InterpscopeError, match="lacks b_enc"):
        load_sae(folder)
    (folder / "cfg.json").write_text("{not json")
    with pytest.raises(InterpscopeError, match="not valid JSON"):
        load_sae(folder)


def test_shape_mismatch_with_the_model_is_explained():
    adapter = get_adapter(tiny_llama())  # d_model 32, d_mlp 64, 2 layers
    check_compatible(_random_sae("relu", d_in=32), adapter)
    with pytest.raises(InterpscopeError, match=r"expects d_in=48 .* has 32 there"):
        check_compatible(_random_sae("relu", d_in=48), adapter)
    with pytest.raises(InterpscopeError, match="layer 8 out of range"):
        check_compatible(_random_sae("relu", d_in=32), adapter, hook_name="blocks.8.hook_resid_post")
    assert check_compatible(_random_sae("relu", d_in=64), adapter, hook_name="blocks.0.mlp.hook_post")
