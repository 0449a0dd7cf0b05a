"""BatchTopK (Bussmann et al. 2024) on random weights in float64: k x batch activations kept across the whole
batch, one global threshold learnt as a running average, inference as a JumpReLU with that threshold, saved as the
common library saves it (a JumpReLU) with its provenance; the library's own BatchTopK checkpoints are read."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from interpscope.config import InterpscopeError
from interpscope.sae import SAEConfig, build_sae, load_sae, registered, save_sae
from interpscope.sae.catalog import describe

D_IN, D_SAE = 12, 40


def _batchtopk(k: int = 3, seed: int = 1):
    sae = build_sae(SAEConfig(d_in=D_IN, d_sae=D_SAE, architecture="batchtopk", k=k), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in sae.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * 0.5)
    return sae


def _x(n: int = 64, seed: int = 2) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_batchtopk_is_registered_with_k_as_its_knob():
    cls = next(cls for cls in registered() if cls.architecture == "batchtopk")
    assert cls.knob.is_count and cls.folder_architecture == "jumprelu" and not cls.resample_dead


def test_batchtopk_training_keeps_k_times_batch_across_the_whole_batch():
    sae = _batchtopk(k=3)
    x = _x(64)
    out = sae.loss(x)
    f = out.features
    assert int((f > 0).sum()) == 3 * 64
    per_row = (f > 0).sum(-1)
    assert per_row.min() != per_row.max()  # rows share the budget: not k per row
    pre = torch.relu((x - sae.b_dec) @ sae.W_enc + sae.b_enc)
    cut = pre.flatten().topk(3 * 64).values[-1]
    assert torch.equal(f > 0, pre >= cut)
    torch.testing.assert_close(f[f > 0], pre[f > 0], rtol=0, atol=0)
    torch.testing.assert_close(out.x_hat, f @ sae.W_dec + sae.b_dec)


def test_batchtopk_threshold_is_a_running_average_of_the_smallest_kept_activation():
    sae = _batchtopk(k=3)
    first, second = sae.loss(_x(64, seed=2)), sae.loss(_x(64, seed=3))
    smallest = [float(out.features.detach()[out.features > 0].min()) for out in (first, second)]
    sae.after_step(first)
    assert torch.equal(sae.threshold, torch.full((D_SAE,), smallest[0], dtype=torch.float64))
    sae.after_step(second)
    expected = 0.99 * smallest[0] + 0.01 * smallest[1]
    torch.testing.assert_close(sae.threshold, torch.full((D_SAE,), expected, dtype=torch.float64))


def test_batchtopk_inference_is_a_jumprelu_with_one_global_threshold():
    sae = _batchtopk()
    with torch.no_grad():
        sae.threshold.fill_(0.4)
    x = _x(50)
    z = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    expected = torch.relu(z) * (z > 0.4)
    torch.testing.assert_close(sae.encode(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(sae.encode(x[7:8]), expected[7:8], rtol=0, atol=1e-12)  # each row alone
    with pytest.raises(ValueError, match="selection"):
        sae.fold_decoder_norms()


def test_batchtopk_auxk_trains_only_dead_latents():
    sae = _batchtopk(k=2)
    sae.observe_dead(torch.arange(D_SAE) < 10)
    out = sae.loss(_x())
    out.terms["auxk"].backward()
    assert torch.count_nonzero(sae.W_dec.grad[10:]) == 0 and torch.count_nonzero(sae.W_dec.grad[:10]) > 0
    assert torch.count_nonzero(sae.W_enc.grad[:, 10:]) == 0 and torch.count_nonzero(sae.W_enc.grad[:, :10]) > 0
    assert not sae.resample_dead


def test_batchtopk_is_saved_as_a_jumprelu_and_labelled_batchtopk(tmp_path):
    sae = _batchtopk(k=5)
    with torch.no_grad():
        sae.threshold.fill_(0.3)
    folder = save_sae(sae, tmp_path / "b")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "jumprelu" and cfg["metadata"]["interpscope"]["architecture"] == "batchtopk"
    tensors = load_file(str(folder / "sae_weights.safetensors"))
    assert set(tensors) == {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"}
    assert torch.equal(tensors["threshold"], torch.full((D_SAE,), 0.3))
    loaded = load_sae(folder, dtype=None)
    assert loaded.cfg.architecture == "batchtopk" and loaded.cfg.k == 5 and not loaded.cfg.extra
    assert describe(folder)["architecture"] == "batchtopk" and "BatchTopK" in describe(folder)["label"]
    x = _x(20)
    torch.testing.assert_close(loaded.encode(x.float()), sae.encode(x).float(), rtol=1e-6, atol=1e-6)
    del cfg["metadata"]["interpscope"]["architecture"]  # the file as any JumpReLU reader sees it
    (folder / "cfg.json").write_text(json.dumps(cfg))
    plain = load_sae(folder, dtype=None)
    assert plain.cfg.architecture == "jumprelu"
    torch.testing.assert_close(plain.encode(x.float()), loaded.encode(x.float()), rtol=0, atol=0)


def test_provenance_that_contradicts_the_architecture_is_refused(tmp_path):
    folder = save_sae(_batchtopk(), tmp_path / "b")
    cfg = json.loads((folder / "cfg.json").read_text())
    cfg["architecture"] = "gated"
    (folder / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpscopeError, match="metadata.interpscope.architecture"):
        load_sae(folder)


def test_batchtopk_training_checkpoints_of_the_library_are_read(tmp_path):
    """The library's trainer saves a scalar topk_threshold and rescales pre-activations by decoder norms."""
    gen = torch.Generator().manual_seed(6)
    tensors = {"W_enc": torch.randn(D_IN, D_SAE, generator=gen), "W_dec": torch.randn(D_SAE, D_IN, generator=gen),
               "b_enc": torch.randn(D_SAE, generator=gen) * 0.3, "b_dec": torch.randn(D_IN, generator=gen) * 0.3,
               "topk_threshold": torch.tensor(0.7)}
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps({"architecture": "batchtopk", "d_in": D_IN, "d_sae": D_SAE, "k": 4.0,
                                                 "rescale_acts_by_decoder_norm": True,
                                                 "metadata": {"sae_lens_version": "6.54.12"}}))
    save_file(tensors, str(folder / "sae_weights.safetensors"))
    sae = load_sae(folder)
    assert sae.cfg.architecture == "batchtopk" and sae.cfg.k == 4
    x = _x().float()
    hidden = ((x - tensors["b_dec"]) @ tensors["W_enc"] + tensors["b_enc"]) * tensors["W_dec"].norm(dim=1)
    torch.testing.assert_close(sae.encode(x), hidden.relu() * (hidden > 0.7), rtol=1e-5, atol=1e-5)


def test_train_eval_and_store_batchtopk_from_the_command_line(tmp_path, capsys, monkeypatch):
    """`sae train --arch batchtopk --k 8`, then `sae eval` and `sae store` on what it saved (tiny GPT-2)."""
    from interpscope.cli import main
    from interpscope.sae.store import FeatureStore
    from tests.sae_store_tiny import save_tiny_lm

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    model = str(save_tiny_lm(tmp_path / "tiny-model"))
    assert main(["sae", "train", "--model", model, "--hook", "blocks.1.hook_resid_post", "--arch", "batchtopk",
                 "--k", "8", "--width", "96", "--tokens", "16384", "--cache-tokens", "3000", "--context", "32",
                 "--batch-size", "256", "--lr", "3e-3", "--out", str(tmp_path / "saes")]) == 0
    folder = json.loads(capsys.readouterr().out)["saved"]["batchtopk-96-k8"]
    history = json.loads((tmp_path / "saes" / "batchtopk-96-k8" / "history.json").read_text())
    assert all(entry["l0"] == pytest.approx(8.0) for entry in history)  # k x batch kept in training
    assert history[-1]["recon"] < 0.6 * history[0]["recon"]
    sae = load_sae(folder)
    threshold = float(sae.threshold[0])
    assert sae.cfg.architecture == "batchtopk" and threshold > 0 and torch.all(sae.threshold == threshold)

    assert main(["sae", "eval", "--sae", folder, "--tokens", "512", "--context", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["architecture"] == "batchtopk" and 2 < report["l0"] < 24 and report["fvu"] < 1
    assert main(["sae", "store", "--sae", folder, "--tokens", "1024", "--context", "64", "--batch-size", "4"]) == 0
    store = FeatureStore(json.loads(capsys.readouterr().out)["store"])
    assert store.manifest["sae_cfg"]["architecture"] == "batchtopk"
    card = store.card(int(store.arrays["fire_count"].argmax()))
    assert card.max_activation > threshold and card.top_contexts
