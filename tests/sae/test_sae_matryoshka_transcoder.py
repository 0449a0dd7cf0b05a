"""Matryoshka BatchTopK and transcoders on planted and tiny cases: the prefix losses are what the paper sums, a
Matryoshka prefix reconstructs on its own where a plain BatchTopK's does not, a transcoder learns a linear map, a
transcoder's loss recovered splices its output in place of the MLP's (checked against an independent module
substitution), and both round-trip through SAELens's folder format (and read SAELens-written folders)."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from interpscope.sae import SAEConfig, build_sae, load_sae, save_sae
from interpscope.sae.arch.matryoshka import MatryoshkaBatchTopKSAE
from interpscope.sae.arch.transcoder import Transcoder
from interpscope.sae.training import TrainConfig, Trainer, TrainRun
from interpscope.sae.transcoder_eval import evaluate_transcoders
from tests.sae_store_tiny import tiny_lm


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class _Rows:
    """A buffer of fresh planted rows (what Trainer reads from a ShuffledBuffer)."""

    def __init__(self, make, batch: int, seed: int = 0):
        self.make, self.batch, self.batches_served = make, batch, 0
        self.generator = torch.Generator().manual_seed(seed)

    def batches(self):
        while True:
            self.batches_served += 1
            yield self.make(self.batch, self.generator)


def _train(sae, make, steps: int, coefficient: float = 0.0, lr: float = 3e-3, batch: int = 256):
    sae.sparse_training = False
    cfg = TrainConfig(total_tokens=steps * batch, batch_size=batch, lr=lr, warmup_steps=10, decay_fraction=0.0,
                      resample_at=(), dead_window_tokens=10**9, log_every=10**6)
    Trainer([TrainRun("run", sae, sparsity=coefficient)], _Rows(make, batch), cfg).train()
    return sae


def _fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    return float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


def test_matryoshka_loss_is_the_sum_of_prefix_losses():
    cfg = SAEConfig(d_in=8, d_sae=16, architecture="matryoshka", k=2, extra={"matryoshka_widths": [4, 8, 16]})
    sae = build_sae(cfg, seed=1)
    assert isinstance(sae, MatryoshkaBatchTopKSAE) and sae.widths == [4, 8, 16]
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        sae.b_enc.normal_()
    out = sae.loss(x, 0.0)
    f = out.features
    assert int((f > 0).sum()) <= 2 * 32 and torch.equal(f, sae.keep_top_in_training(sae.pre_activations(x)))
    expected = {}
    for width in (4, 8, 16):
        x_hat = f[:, :width] @ sae.W_dec[:width] + sae.b_dec
        expected[width] = (x - x_hat).pow(2).sum(-1).mean()
        assert torch.allclose(out.terms[f"recon_{width}"], expected[width], rtol=1e-5)
    assert torch.allclose(out.total, sum(expected.values()), rtol=1e-5)
    assert torch.allclose(out.x_hat, f @ sae.W_dec + sae.b_dec, atol=1e-5)


def test_matryoshka_widths_are_checked():
    for widths, message in (([8, 4, 16], "increasing"), ([4, 8], "last"), ([1, 16], "at least k")):
        with pytest.raises(ValueError, match=message):
            build_sae(SAEConfig(d_in=8, d_sae=16, architecture="matryoshka", k=2,
                                extra={"matryoshka_widths": widths}))


def _planted(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Two levels, orthonormal in d 16: every row has one of 4 'parent' directions (norm ~3) and one of that
    parent's 3 'child' directions (norm ~1), so most of the variance is in the parents."""
    basis = torch.eye(16)
    parent = torch.randint(0, 4, (batch,), generator=generator)
    child = 4 + 3 * parent + torch.randint(0, 3, (batch,), generator=generator)
    return (3 * basis[parent] * (1 + 0.1 * torch.rand(batch, 1, generator=generator))
            + basis[child] * (1 + 0.1 * torch.rand(batch, 1, generator=generator)))


def test_a_matryoshka_prefix_alone_reconstructs_where_batchtopk_does_not():
    prefix = 4
    x = _planted(2048, torch.Generator().manual_seed(5))
    fvus = {}
    for arch in ("matryoshka", "batchtopk"):
        extra = {"matryoshka_widths": [prefix, 16]} if arch == "matryoshka" else {}
        sae = _train(build_sae(SAEConfig(d_in=16, d_sae=16, architecture=arch, k=2, extra=extra), seed=0),
                     _planted, steps=300)
        with torch.no_grad():
            f = sae.encode(x)
            fvus[arch] = (_fvu(x, f[:, :prefix] @ sae.W_dec[:prefix] + sae.b_dec), _fvu(x, sae.decode(f)))
    matryoshka_prefix, matryoshka_full = fvus["matryoshka"]
    plain_prefix, plain_full = fvus["batchtopk"]
    assert matryoshka_full < 0.2 and plain_full < 0.2, fvus  # both reconstruct with the whole dictionary
    assert matryoshka_prefix < 0.5 * plain_prefix, fvus  # only the Matryoshka's first features stand on their own


def _linear_pairs(a: torch.Tensor):
    def make(batch: int, generator: torch.Generator) -> torch.Tensor:
        x = torch.randn(batch, a.shape[0], generator=generator)
        return torch.cat([x, x @ a], -1)
    return make


def test_a_transcoder_learns_a_linear_mlp():
    a = torch.randn(8, 6, generator=torch.Generator().manual_seed(2)) / 3
    cfg = SAEConfig(d_in=8, d_sae=48, architecture="transcoder", apply_b_dec_to_input=False, extra={"d_out": 6})
    tc = _train(build_sae(cfg, seed=0), _linear_pairs(a), steps=600, coefficient=1e-3)
    assert isinstance(tc, Transcoder) and tuple(tc.W_dec.shape) == (48, 6)
    x = torch.randn(4096, 8, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert _fvu(x @ a, tc(x)) < 0.1
        assert _fvu(x @ a, tc(x)) < 0.2 * _fvu(x @ a, torch.zeros_like(x @ a) + (x @ a).mean(0))


class _Stash(nn.Module):
    """Wraps ln_2: keeps its input (the residual stream before the MLP, hook_resid_mid)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.seen = inner, None

    def forward(self, h):
        self.seen = h
        return self.inner(h)


class _Replaced(nn.Module):
    """Stands in for the MLP: positions 1.. come from `fn` of the stashed residual, position 0 from the MLP."""

    def __init__(self, inner: nn.Module, stash: _Stash, fn):
        super().__init__()
        self.inner, self.stash, self.fn = inner, stash, fn

    def forward(self, h):
        out = self.inner(h).clone()
        out[:, 1:] = self.fn(self.stash.seen[:, 1:])
        return out


def _ce(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.double()
    logp = torch.log_softmax(logits[:, 1:-1], -1)
    return float(-logp.gather(-1, ids[:, 2:, None]).mean())


def test_transcoder_loss_recovered_splices_in_place_of_the_mlp():
    lm = tiny_lm()
    torch.manual_seed(0)
    cfg = SAEConfig(d_in=32, d_sae=40, architecture="transcoder", hook_name="blocks.1.hook_resid_mid",
                    hook_layer=1, apply_b_dec_to_input=False, model_name=lm.name,
                    extra={"d_out": 32, "hook_name_out": "blocks.1.hook_mlp_out", "hook_layer_out": 1})
    tc = build_sae(cfg, seed=3)
    with torch.no_grad():
        tc.b_enc.fill_(0.1)
        tc.b_dec.normal_()
    ids = torch.randint(0, 50257, (4, 24), generator=torch.Generator().manual_seed(1))
    result, = evaluate_transcoders(lm, [tc], ids=ids, batch_size=2)

    def substituted(fn) -> float:
        model = copy.deepcopy(lm.model)
        block = model.transformer.h[1]
        block.ln_2 = _Stash(block.ln_2)
        block.mlp = _Replaced(block.mlp, block.ln_2, fn)
        return _ce(model, ids)

    assert result.sink_tokens == 0
    assert result.ce_clean == pytest.approx(_ce(lm.model, ids), rel=1e-6)
    assert result.ce_zero == pytest.approx(substituted(torch.zeros_like), rel=1e-6)
    assert result.ce_sae == pytest.approx(substituted(lambda h: tc(h)), rel=1e-5)
    lr = (result.ce_zero - result.ce_sae) / (result.ce_zero - result.ce_clean)
    assert result.loss_recovered == pytest.approx(lr, rel=1e-9)
    with torch.no_grad():  # a transcoder that writes nothing recovers nothing
        tc.W_dec.zero_()
        tc.b_dec.zero_()
    silent, = evaluate_transcoders(lm, [tc], ids=ids, batch_size=2)
    assert silent.ce_sae == pytest.approx(silent.ce_zero, rel=1e-9) and silent.loss_recovered == pytest.approx(0.0)


def _same_tensors(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def test_matryoshka_and_transcoder_round_trip_the_saelens_folder_format(tmp_path):
    mat = build_sae(SAEConfig(d_in=8, d_sae=16, architecture="matryoshka", k=3, hook_name="blocks.0.hook_resid_post",
                              extra={"matryoshka_widths": [4, 16]}), seed=1)
    with torch.no_grad():
        mat.threshold.fill_(0.25)
        mat.b_enc.normal_()
    raw = json.loads((save_sae(mat, tmp_path / "m") / "cfg.json").read_text())
    assert raw["architecture"] == "jumprelu" and raw["k"] == 3 and raw["matryoshka_widths"] == [4, 16]
    assert raw["metadata"]["interpscope"]["architecture"] == "matryoshka_batchtopk"
    back = load_sae(tmp_path / "m")
    assert isinstance(back, MatryoshkaBatchTopKSAE) and back.widths == [4, 16] and back.cfg.k == 3
    _same_tensors(mat, back)

    tc = build_sae(SAEConfig(d_in=8, d_sae=12, architecture="transcoder", hook_name="blocks.2.hook_resid_mid",
                             apply_b_dec_to_input=False,
                             extra={"d_out": 6, "hook_name_out": "blocks.2.hook_mlp_out", "hook_layer_out": 2}),
                   seed=2)
    raw = json.loads((save_sae(tc, tmp_path / "t") / "cfg.json").read_text())
    assert (raw["architecture"], raw["d_in"], raw["d_out"], raw["hook_name_out"], raw["hook_layer_out"]) == \
        ("transcoder", 8, 6, "blocks.2.hook_mlp_out", 2)
    back = load_sae(tmp_path / "t")
    assert isinstance(back, Transcoder) and back.d_out == 6 and back.hook_name_out == "blocks.2.hook_mlp_out"
    _same_tensors(tc, back)
    x = torch.randn(5, 8)
    assert torch.allclose(back(x), tc(x))


def _saelens_folder(folder, cfg: dict, tensors: dict) -> None:
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "sae_weights.safetensors"))


def test_folders_as_saelens_writes_them_are_read(tmp_path):
    g = torch.Generator().manual_seed(0)
    _saelens_folder(tmp_path / "tc", {
        "architecture": "transcoder", "d_in": 8, "d_sae": 10, "d_out": 5, "dtype": "float32", "device": "cpu",
        "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
        "hook_name_out": "blocks.3.hook_mlp_out", "hook_layer_out": 3, "hook_head_index_out": None,
        "metadata": {"sae_lens_version": "6.5.0", "hook_name": "blocks.3.hook_resid_mid", "model_name": "x"}},
        {"W_enc": torch.randn(8, 10, generator=g), "W_dec": torch.randn(10, 5, generator=g),
         "b_enc": torch.randn(10, generator=g), "b_dec": torch.randn(5, generator=g)})
    tc = load_sae(tmp_path / "tc")
    x = torch.randn(3, 8, generator=g)
    assert isinstance(tc, Transcoder) and tc.cfg.hook_name == "blocks.3.hook_resid_mid"
    assert torch.allclose(tc(x), torch.relu(x @ tc.W_enc + tc.b_enc) @ tc.W_dec + tc.b_dec)

    W_enc = torch.randn(8, 16, generator=g)
    _saelens_folder(tmp_path / "mat", {
        "architecture": "matryoshka_batchtopk", "d_in": 8, "d_sae": 16, "k": 2, "matryoshka_widths": [4, 16],
        "dtype": "float32", "apply_b_dec_to_input": True, "normalize_activations": "none",
        "rescale_acts_by_decoder_norm": False, "metadata": {"sae_lens_version": "6.5.0",
                                                            "hook_name": "blocks.0.hook_resid_post"}},
        {"W_enc": W_enc, "W_dec": torch.randn(16, 8, generator=g), "b_enc": torch.zeros(16),
         "b_dec": torch.zeros(8), "topk_threshold": torch.tensor(0.5)})
    mat = load_sae(tmp_path / "mat")
    assert isinstance(mat, MatryoshkaBatchTopKSAE) and mat.widths == [4, 16]
    assert torch.allclose(mat.threshold, torch.full((16,), 0.5))
    z = x @ W_enc
    assert torch.allclose(mat.encode(x), torch.relu(z) * (z > 0.5))
    with pytest.raises(Exception, match="d_out"):
        _saelens_folder(tmp_path / "bad", {"architecture": "transcoder", "d_in": 8, "d_sae": 10},
                        {"W_enc": torch.zeros(8, 10)})
        load_sae(tmp_path / "bad")


def test_a_transcoder_folder_builds_a_feature_store_with_cards(tmp_path, monkeypatch):
    from interpscope.sae.store import FeatureStore, build_store

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    lm = tiny_lm()
    cfg = SAEConfig(d_in=32, d_sae=24, architecture="transcoder", hook_name="blocks.1.hook_resid_mid",
                    hook_layer=1, apply_b_dec_to_input=False, model_name=lm.name,
                    extra={"d_out": 32, "hook_name_out": "blocks.1.hook_mlp_out", "hook_layer_out": 1})
    save_sae(build_sae(cfg, seed=4), tmp_path / "tc")
    build_store(lm, tmp_path / "tc", n_tokens=1024, eval_tokens=256, context_size=32)
    store = FeatureStore.for_sae(tmp_path / "tc")
    assert store.d_sae == 24 and float((store.density > 0).mean()) > 0.5  # bias 0: about half the tokens fire
    top = int(store.density.argmax())
    assert float(store.arrays["top_act"][top].max()) > 0  # top contexts of a feature
    metrics = store.manifest["metrics"]
    assert metrics["hook_name"] == "blocks.1.hook_resid_mid->blocks.1.hook_mlp_out"  # evaluated as a transcoder


def _noisy_planted(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Planted rows plus dense noise: a JumpReLU only gets sparse by learning thresholds above the noise."""
    return _planted(batch, generator) + 0.3 * torch.randn(batch, 16, generator=generator)


def test_jumprelu_thresholds_learn_in_a_short_run_and_the_l0_coefficient_sets_l0():
    """At the sweep's learning rate (7e-4) and a few hundred steps, the L0 penalty must reach the thresholds: with
    the threshold learning at the run's rate every coefficient of the shipped sweep gave the same dense L0."""
    x = _noisy_planted(2048, torch.Generator().manual_seed(7))
    l0 = {}
    for coefficient in (0.01, 1.0):
        sae = _train(build_sae(SAEConfig(d_in=16, d_sae=32, architecture="jumprelu"), seed=0), _noisy_planted,
                     steps=250, coefficient=coefficient, lr=7e-4)
        with torch.no_grad():
            l0[coefficient] = float((sae.encode(x) > 0).sum(-1).float().mean())
            assert float(sae.threshold.max()) > 0.5  # the thresholds travelled well past their start (0.1)
    assert l0[1.0] < 0.5 * l0[0.01], l0
    assert l0[1.0] < 8, l0  # close to the two planted directions per row, not a dense code
