"""JumpReLU transcoders (plain and with a skip connection): the forward pass is the formula, training learns a planted
sparse map (and the skip learns a planted linear part), the L0 penalty moves the thresholds, decoder-norm folding is
exact, and folders round-trip in SAELens's layout (W_skip stored [d_out, d_in], read back transposed)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from interpscope.config import InterpscopeError
from interpscope.sae import SAEConfig, build_sae, load_sae, save_sae
from interpscope.sae.arch.jumprelu_transcoder import JumpReLUTranscoder
from interpscope.sae.arch.transcoder import Transcoder
from interpscope.sae.training import TrainConfig, Trainer, TrainRun

D_IN, D_OUT, D_SAE = 6, 5, 16


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cfg(skip: bool, d_sae: int = D_SAE) -> SAEConfig:
    return SAEConfig(d_in=D_IN, d_sae=d_sae, architecture="jumprelu_transcoder", model_name="m",
                     hook_name="blocks.1.mlp.hook_in", hook_layer=1,
                     extra={"d_out": D_OUT, "hook_name_out": "blocks.1.hook_mlp_out", "hook_layer_out": 1,
                            "skip": skip})


def _randomised(skip: bool, seed: int = 0) -> JumpReLUTranscoder:
    tc = build_sae(_cfg(skip), seed=seed)
    assert isinstance(tc, JumpReLUTranscoder)
    gen = torch.Generator().manual_seed(seed + 10)
    with torch.no_grad():
        for param in tc.parameters():
            param.copy_(torch.randn(param.shape, generator=gen))
        tc.threshold.abs_()
    return tc


def test_forward_is_the_jumprelu_formula_plus_the_skip():
    tc = _randomised(skip=True)
    x = torch.randn(20, D_IN, generator=torch.Generator().manual_seed(1))
    z = x @ tc.W_enc + tc.b_enc
    f = torch.where(z > tc.threshold, z, torch.zeros_like(z))
    assert torch.allclose(tc.encode(x), f)
    expected = f @ tc.W_dec + tc.b_dec + x @ tc.W_skip
    assert torch.allclose(tc(x), expected, atol=1e-5)
    assert torch.allclose(tc.decode(tc.encode(x)), expected, atol=1e-5)  # the skip reads the last encode's input
    assert torch.allclose(tc.decode(f, x), expected, atol=1e-5)
    with pytest.raises(ValueError, match="skip connection"):
        tc.decode(f[:3])  # not the rows last encoded
    plain = _randomised(skip=False)
    assert not hasattr(plain, "W_skip") and isinstance(plain, Transcoder) and plain.paired
    assert torch.allclose(plain(x), plain.encode(x) @ plain.W_dec + plain.b_dec, atol=1e-5)


def test_skip_starts_at_zero_and_b_dec_at_the_target_mean():
    tc = build_sae(_cfg(skip=True), seed=0)
    assert tc.W_skip.shape == (D_IN, D_OUT) and not tc.W_skip.any()
    rows = torch.randn(64, D_IN + D_OUT, generator=torch.Generator().manual_seed(3)) + 2.0
    tc.init_from_batch(rows)
    assert torch.allclose(tc.b_dec, rows[:, D_IN:].mean(0))


class _Rows:
    def __init__(self, make, batch: int):
        self.make, self.batch, self.batches_served = make, batch, 0
        self.generator = torch.Generator().manual_seed(0)

    def batches(self):
        while True:
            self.batches_served += 1
            yield self.make(self.batch, self.generator)


def _train(tc, make, steps: int, coefficient: float, lr: float = 3e-3):
    cfg = TrainConfig(total_tokens=steps * 128, batch_size=128, lr=lr, warmup_steps=10, decay_fraction=0.0,
                      resample_at=(), dead_window_tokens=10**9, log_every=10**6)
    Trainer([TrainRun("run", tc, sparsity=coefficient)], _Rows(make, 128), cfg).train()
    tc.eval()
    return tc


def _planted(skip_map: torch.Tensor | None, dense: float = 0.0):
    """x_in = sparse codes times 4 input directions (+ dense Gaussian noise of scale `dense`, which no few sparse
    features can carry through a linear map); y = the same codes times 4 output directions (+ x_in @ skip)."""
    gen = torch.Generator().manual_seed(7)
    dirs_in = torch.linalg.qr(torch.randn(D_IN, D_IN, generator=gen))[0][:4]
    dirs_out = torch.randn(4, D_OUT, generator=gen)

    def make(n, generator):
        codes = torch.rand(n, 4, generator=generator) * (torch.rand(n, 4, generator=generator) < 0.3)
        x_in = codes @ dirs_in + dense * torch.randn(n, D_IN, generator=generator)
        y = codes @ dirs_out + (x_in @ skip_map if skip_map is not None else 0.0)
        return torch.cat([x_in, y], dim=1)
    return make


def _fvu(tc, make) -> float:
    rows = make(2000, torch.Generator().manual_seed(99))
    x_in, y = rows[:, :D_IN], rows[:, D_IN:]
    with torch.no_grad():
        y_hat = tc(x_in)
    return float((y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())


def test_training_learns_a_planted_map_and_the_skip_learns_its_linear_part():
    """A map with a dense linear part: the skip transcoder fits it, and its skip term carries that linear map (on
    fresh dense inputs it points the planted map's way). A plain transcoder is no longer a useful yardstick here:
    since its ridge start (issue 42), its features absorb much of a linear map too."""
    skip_map = torch.randn(D_IN, D_OUT, generator=torch.Generator().manual_seed(5))
    make = _planted(skip_map, dense=1.0)
    with_skip = _train(build_sae(_cfg(skip=True), seed=1), make, 400, 1e-3, lr=1e-2)
    assert _fvu(with_skip, make) < 0.1
    assert with_skip.W_skip.abs().max() > 0.1  # trained away from its zero start
    x = torch.randn(500, D_IN, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        carried, planted = with_skip.skip_term(x).flatten(), (x @ skip_map).flatten()
    assert float(torch.nn.functional.cosine_similarity(carried, planted, dim=0)) > 0.7


def test_the_l0_penalty_raises_thresholds_and_lowers_l0():
    make = _planted(None)
    l0s = []
    for coefficient in (0.0, 0.5):
        tc = _train(build_sae(_cfg(skip=False), seed=2), make, 200, coefficient, lr=5e-3)
        rows = make(1000, torch.Generator().manual_seed(4))
        with torch.no_grad():
            l0s.append(float((tc.encode(rows[:, :D_IN]) > 0).float().sum(-1).mean()))
        assert bool((tc.threshold >= 0).all())
    assert l0s[1] < 0.7 * l0s[0]


def test_folding_decoder_norms_keeps_the_output():
    tc = _randomised(skip=True)
    x = torch.randn(30, D_IN, generator=torch.Generator().manual_seed(2))
    before = tc(x)
    with torch.no_grad():
        tc.fold_decoder_norms()
    assert torch.allclose(tc.W_dec.norm(dim=1), torch.ones(D_SAE), atol=1e-5)
    assert torch.allclose(tc(x), before, atol=1e-4)


@pytest.mark.parametrize("skip", [False, True])
def test_folder_round_trip_in_saelens_layout(tmp_path, skip):
    tc = _randomised(skip=skip, seed=3)
    save_sae(tc, tmp_path / "tc")
    raw = json.loads((tmp_path / "tc" / "cfg.json").read_text())
    assert raw["architecture"] == ("jumprelu_skip_transcoder" if skip else "jumprelu_transcoder")
    assert raw["d_out"] == D_OUT and raw["hook_name_out"] == "blocks.1.hook_mlp_out"
    assert raw["apply_b_dec_to_input"] is False
    stored = load_file(str(tmp_path / "tc" / "sae_weights.safetensors"))
    if skip:
        assert torch.equal(stored["W_skip"], tc.W_skip.detach().T)  # SAELens's [d_out, d_in]
    back = load_sae(tmp_path / "tc")
    assert isinstance(back, JumpReLUTranscoder) and back.skip is skip
    assert back.cfg.extra["hook_name_out"] == "blocks.1.hook_mlp_out" and back.d_out == D_OUT
    for name, tensor in tc.state_dict().items():
        assert torch.equal(getattr(back, name).detach(), tensor), name
    x = torch.randn(10, D_IN, generator=torch.Generator().manual_seed(8))
    assert torch.allclose(back(x), tc(x))


def test_folder_with_misshapen_skip_or_missing_threshold_is_refused(tmp_path):
    tc = _randomised(skip=True, seed=4)
    save_sae(tc, tmp_path / "tc")
    weights = tmp_path / "tc" / "sae_weights.safetensors"
    from safetensors.torch import save_file

    tensors = load_file(str(weights))
    save_file({**tensors, "W_skip": torch.zeros(D_IN, D_IN)}, str(weights))
    with pytest.raises(InterpscopeError, match="W_skip has shape"):
        load_sae(tmp_path / "tc")
    save_file({k: v for k, v in tensors.items() if k != "threshold"}, str(weights))
    with pytest.raises(InterpscopeError, match="lacks threshold"):
        load_sae(tmp_path / "tc")
