"""Folders in the common SAE library's layouts (SAELens), built by hand: each config variant is read with that
library's meaning (the expected values are its formulas, written out here) or refused with a message naming the
field or tensor."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from interpscope.config import InterpscopeError
from interpscope.sae import load_sae

D_IN, D_SAE = 10, 24


def _tensors(seed: int = 0, **extra) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tensors = {"W_enc": torch.randn(D_IN, D_SAE, generator=gen), "W_dec": torch.randn(D_SAE, D_IN, generator=gen),
               "b_enc": torch.randn(D_SAE, generator=gen) * 0.3, "b_dec": torch.randn(D_IN, generator=gen) * 0.3}
    tensors.update(extra)
    return tensors


def _folder(tmp_path, cfg: dict, tensors: dict, name: str = "sae"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps({"d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", **cfg}))
    save_file({key: value.contiguous() for key, value in tensors.items()}, str(folder / "sae_weights.safetensors"))
    return folder


def _x(n: int = 40, seed: int = 9) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed)) * 2 + 0.5


def _topk(pre: torch.Tensor, k: int) -> torch.Tensor:
    values, index = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, index, values.relu())


V6 = {"metadata": {"sae_lens_version": "6.54.12", "hook_name": "blocks.3.hook_resid_post", "model_name": "gpt2"}}


def test_topk_with_rescale_acts_by_decoder_norm_matches_the_library(tmp_path):
    tensors = _tensors()
    norms = tensors["W_dec"].norm(dim=1)
    assert norms.std() > 0.1  # the rescaling matters
    sae = load_sae(_folder(tmp_path, {"architecture": "topk", "k": 4, "rescale_acts_by_decoder_norm": True, **V6},
                           tensors))
    x = _x()
    pre = (x - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"]
    expected = _topk(pre * norms, 4)
    torch.testing.assert_close(sae.encode(x), expected, rtol=1e-5, atol=1e-5)
    x_hat = (expected / norms) @ tensors["W_dec"] + tensors["b_dec"]
    torch.testing.assert_close(sae(x), x_hat, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(D_SAE))
    plain = load_sae(_folder(tmp_path, {"architecture": "topk", "k": 4, **V6}, tensors, "plain"))
    torch.testing.assert_close(plain.encode(x), _topk(pre, 4), rtol=1e-5, atol=1e-5)


def test_older_topk_layout_is_a_topk_sae(tmp_path):
    cfg = {"architecture": "standard", "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 3},
           "hook_point": "blocks.2.hook_resid_pre", "hook_point_layer": 2, "model_name": "gpt2-small"}
    tensors = _tensors(1)
    sae = load_sae(_folder(tmp_path, cfg, tensors))
    assert sae.cfg.architecture == "topk" and sae.cfg.k == 3
    assert sae.cfg.hook_name == "blocks.2.hook_resid_pre" and sae.cfg.hook_layer == 2
    x = _x()
    pre = (x - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"]
    torch.testing.assert_close(sae.encode(x), _topk(pre, 3))
    assert float((sae.encode(x) > 0).sum(-1).float().mean()) <= 3
    newer = dict(cfg, sae_lens_version="6.2.0")  # from 6.0 the library no longer reads activation_fn_str
    with pytest.raises(InterpscopeError, match="activation_fn_str"):
        load_sae(_folder(tmp_path, newer, tensors, "v6"))


def test_jumprelu_with_negative_thresholds_never_outputs_negative_values(tmp_path):
    threshold = torch.linspace(-1.0, 0.5, D_SAE)
    tensors = _tensors(2, threshold=threshold)
    sae = load_sae(_folder(tmp_path, {"architecture": "jumprelu", **V6}, tensors))
    x = _x()
    z = (x - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"]
    assert ((z > threshold) & (z < 0)).any()  # the case that matters is present
    f = sae.encode(x)
    torch.testing.assert_close(f, z.relu() * (z > threshold))
    assert (f >= 0).all()


def test_log_threshold_of_older_jumprelu_checkpoints_is_read_as_its_exponential(tmp_path):
    log_threshold = torch.linspace(-3.0, 0.0, D_SAE)
    tensors = _tensors(3, log_threshold=log_threshold)
    sae = load_sae(_folder(tmp_path, {"architecture": "jumprelu", **V6}, tensors))
    torch.testing.assert_close(sae.threshold.detach(), log_threshold.exp())


@pytest.mark.parametrize("kind", ["layer_norm", "constant_norm_rescale"])
def test_run_time_normalisation_is_applied_where_activations_enter_and_leave(tmp_path, kind):
    tensors = _tensors(4)
    sae = load_sae(_folder(tmp_path, {"architecture": "standard", "normalize_activations": kind, **V6}, tensors))
    x = _x() * 7.0
    if kind == "layer_norm":
        mu = x.mean(-1, keepdim=True)
        std = (x - mu).std(-1, keepdim=True)
        x_n, undo = (x - mu) / (std + 1e-5), (lambda y: y * std + mu)
    else:
        coeff = D_IN ** 0.5 / x.norm(dim=-1, keepdim=True)
        x_n, undo = x * coeff, (lambda y: y / coeff)
    f = torch.relu((x_n - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"])
    x_hat = undo(f @ tensors["W_dec"] + tensors["b_dec"])
    torch.testing.assert_close(sae.encode(x), f, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae(x), x_hat, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae.decode(f, x), x_hat, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae.decode(sae.encode(x)), x_hat, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae.encode(x * 3.0), f, rtol=1e-4, atol=1e-4)  # scale-free input
    with pytest.raises(ValueError, match="statistics"):
        sae.decode(f[:5])
    with pytest.raises(ValueError, match="raw activations"):
        sae.loss(x)


@pytest.mark.parametrize("value, shown", [("expected_average_only_in", "expected_average_only_in"),
                                          (True, "expected_average_only_in"),
                                          ("covariance_whitening", "covariance_whitening"),
                                          ("batch_norm", "batch_norm")])
def test_normalisations_whose_scale_is_not_stored_are_refused_by_name(tmp_path, value, shown):
    with pytest.raises(InterpscopeError, match=f"normalize_activations is '{shown}'"):
        load_sae(_folder(tmp_path, {"architecture": "standard", "normalize_activations": value}, _tensors()))


def test_false_normalisation_of_older_layouts_means_none(tmp_path):
    sae = load_sae(_folder(tmp_path, {"normalize_activations": False}, _tensors()))
    assert sae.cfg.normalize_activations == "none"


def test_scaling_factor_is_applied_as_the_library_did_or_refused_by_name(tmp_path):
    tensors = _tensors(5)
    x = _x()
    f = torch.relu((x - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"])
    ones = load_sae(_folder(tmp_path, {}, dict(tensors, scaling_factor=torch.ones(D_SAE)), "ones"))
    torch.testing.assert_close(ones(x), f @ tensors["W_dec"] + tensors["b_dec"])
    factor = torch.linspace(0.5, 2.0, D_SAE)
    scaled = load_sae(_folder(tmp_path, {"finetuning_scaling_factor": True},
                              dict(tensors, scaling_factor=factor), "scaled"))
    torch.testing.assert_close(scaled.encode(x), f)
    torch.testing.assert_close(scaled(x), (f * factor) @ tensors["W_dec"] + tensors["b_dec"])
    with pytest.raises(InterpscopeError, match="scaling_factor.*finetuning_scaling_factor"):
        load_sae(_folder(tmp_path, {}, dict(tensors, scaling_factor=factor), "unflagged"))
    with pytest.raises(InterpscopeError, match="holds decoder_bias_extra"):
        load_sae(_folder(tmp_path, {}, dict(tensors, decoder_bias_extra=torch.zeros(D_IN)), "extra"))


@pytest.mark.parametrize("field, value, message", [
    ("reshape_activations", "hook_z", "reshape_activations"),
    ("hook_point_head_index", 3, "hook_head_index"),
    ("architecture", "crosscoder", "field architecture is 'crosscoder'"),
    ("architecture", "transcoder", "transcoder needs a positive integer d_out"),
    ("activation_fn_str", "tanh-relu", "activation_fn_str"),
    ("apply_b_dec_to_input", "yes", "apply_b_dec_to_input"),
])
def test_fields_interpscope_cannot_honour_are_refused_by_name(tmp_path, field, value, message):
    with pytest.raises(InterpscopeError, match=message):
        load_sae(_folder(tmp_path, {field: value}, _tensors()))


def test_topk_k_out_of_range_is_refused_naming_k(tmp_path):
    with pytest.raises(InterpscopeError, match="k="):
        load_sae(_folder(tmp_path, {"architecture": "topk", "k": D_SAE + 1, **V6}, _tensors()))
    with pytest.raises(InterpscopeError, match="field k"):
        load_sae(_folder(tmp_path, {"architecture": "topk", "k": 2.5, **V6}, _tensors(), "half"))
    with pytest.raises(InterpscopeError, match="k .4. and activation_fn_kwargs.k .5. disagree"):
        load_sae(_folder(tmp_path, {"architecture": "topk", "k": 4, "activation_fn_kwargs": {"k": 5}},
                         _tensors(), "two"))


def test_a_hugging_face_id_of_the_bundled_model_reads_as_that_model(tmp_path):
    cfg = {"architecture": "standard", "metadata": {"model_name": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                                    "hook_name": "blocks.15.hook_resid_post",
                                                    "sae_lens_version": "6.54.12"}}
    sae = load_sae(_folder(tmp_path, cfg, _tensors()))
    assert sae.cfg.model_name == "smollm2-135m"
    assert sae.cfg.extra["model_name_in_cfg"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_model_that_cannot_be_loaded_points_at_model_flag(tmp_path, capsys, monkeypatch):
    from interpscope.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = {"architecture": "standard", "model_name": "no-such-owner/no-such-model-xyz",
           "hook_name": "blocks.0.hook_resid_post"}
    folder = _folder(tmp_path, cfg, _tensors())
    assert main(["sae", "eval", "--sae", str(folder), "--json"]) == 2
    err = capsys.readouterr().err
    assert "no-such-owner/no-such-model-xyz" in err and "--model" in err and err.count("\n") == 1
