"""docs/methods/sae.md checks on random weights in float64: gated == JumpReLU, gated reduces to ReLU, the
gradient routing of every loss term, decoder-norm folding, gamma, TopK's k nonzeros, loss-recovered arithmetic,
and the JumpReLU straight-through threshold gradient."""
from __future__ import annotations

import pytest
import torch

from interpscope.sae.architectures import SAEConfig, build_sae, canonical_architecture
from interpscope.sae.evaluation import loss_recovered, shrinkage

D_IN, D_SAE = 12, 40


def _randomise(sae, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in sae.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=param.dtype) * 0.5)


def _sae(arch: str, seed: int = 1, **kwargs):
    sae = build_sae(SAEConfig(d_in=D_IN, d_sae=D_SAE, architecture=arch, **kwargs), dtype=torch.float64)
    _randomise(sae, seed)
    return sae


def _x(n: int = 64, seed: int = 2) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_gated_equals_jumprelu_with_threshold_max_theta_zero():
    gated = _sae("gated")
    jump = _sae("jumprelu", seed=5)
    with torch.no_grad():
        jump.W_enc.copy_(gated.W_enc * torch.exp(gated.r_mag))
        jump.b_enc.copy_(gated.b_mag)
        jump.threshold.copy_(gated.jumprelu_threshold().clamp_min(0))
        jump.W_dec.copy_(gated.W_dec)
        jump.b_dec.copy_(gated.b_dec)
    x = _x()
    f_gated = gated.encode(x)
    assert (f_gated > 0).any() and (f_gated == 0).any()
    torch.testing.assert_close(jump.encode(x), f_gated, rtol=0, atol=1e-12)
    torch.testing.assert_close(jump(x), gated(x), rtol=0, atol=1e-12)


def test_gated_with_rmag_zero_and_bmag_bgate_is_relu_sae():
    gated = _sae("gated")
    relu = _sae("relu", seed=7)
    with torch.no_grad():
        gated.r_mag.zero_()
        gated.b_mag.copy_(gated.b_gate)
        relu.W_enc.copy_(gated.W_enc)
        relu.b_enc.copy_(gated.b_gate)
        relu.W_dec.copy_(gated.W_dec)
        relu.b_dec.copy_(gated.b_dec)
    x = _x()
    torch.testing.assert_close(gated.encode(x), relu.encode(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(gated(x), relu(x), rtol=0, atol=1e-12)


def _grads(sae, term: str, x: torch.Tensor) -> dict[str, torch.Tensor]:
    sae.zero_grad()
    out = sae.loss(x, l1=0.7)
    out.terms[term].backward()
    return {name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for name, p in sae.named_parameters()}


def test_gated_gradient_routing():
    sae = _sae("gated")
    x = _x()
    aux = _grads(sae, "aux", x)
    for name in ("W_dec", "r_mag", "b_mag"):
        assert torch.count_nonzero(aux[name]) == 0, f"aux loss leaked into {name}"
    for name in ("W_enc", "b_gate"):
        assert torch.count_nonzero(aux[name]) > 0, f"aux loss should train {name}"
    recon = _grads(sae, "recon", x)
    assert torch.count_nonzero(recon["b_gate"]) == 0
    for name in ("W_enc", "r_mag", "b_mag", "W_dec", "b_dec"):
        assert torch.count_nonzero(recon[name]) > 0, f"recon loss should train {name}"
    sparsity = _grads(sae, "sparsity", x)
    for name in ("r_mag", "b_mag", "W_dec"):
        assert torch.count_nonzero(sparsity[name]) == 0, f"sparsity loss leaked into {name}"
    assert torch.count_nonzero(sparsity["b_gate"]) > 0


def test_gated_aux_term_uses_frozen_decoder_but_live_gate():
    """The aux term equals ||x - (ReLU(pi) W_dec + b_dec)||^2 with the decoder values of the moment."""
    sae = _sae("gated")
    x = _x()
    out = sae.loss(x, l1=0.0)
    pi_gate = (x - sae.b_dec) @ sae.W_enc + sae.b_gate
    expected = (x - (torch.relu(pi_gate) @ sae.W_dec + sae.b_dec)).pow(2).sum(-1).mean()
    torch.testing.assert_close(out.terms["aux"], expected)
    torch.testing.assert_close(out.terms["sparsity"], torch.zeros((), dtype=torch.float64))


@pytest.mark.parametrize("arch", ["relu", "gated", "jumprelu"])
def test_folding_decoder_norms_leaves_reconstruction_unchanged(arch):
    sae = _sae(arch)
    with torch.no_grad():
        sae.W_dec.mul_(torch.rand(D_SAE, 1, dtype=torch.float64) * 3 + 0.1)
    x = _x()
    before = sae(x)
    sae.fold_decoder_norms()
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(D_SAE, dtype=torch.float64))
    torch.testing.assert_close(sae(x), before, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("arch", ["relu", "gated", "topk", "jumprelu"])
def test_input_scale_folding_reads_raw_activations(arch):
    sae = _sae(arch, k=5)
    x = _x()
    scale = 0.37
    before = sae(x * scale) / scale
    sae.fold_input_scale(scale)
    torch.testing.assert_close(sae(x), before, rtol=1e-10, atol=1e-10)


def test_shrinkage_gamma():
    x = _x()
    assert shrinkage(x, x) == pytest.approx(1.0, abs=1e-12)
    assert shrinkage(x, 0.5 * x) == pytest.approx(0.5, abs=1e-12)


def test_topk_gives_exactly_k_nonzeros():
    sae = _sae("topk", k=7)
    with torch.no_grad():
        sae.b_enc.fill_(10.0)  # all pre-activations positive: ReLU after TopK removes none
    f = sae.encode(_x(200))
    assert torch.equal((f != 0).sum(-1), torch.full((200,), 7))
    pre = sae.pre_activations(_x(200))
    kth = pre.topk(7, dim=-1).values[:, -1:]
    assert torch.equal((f != 0), pre >= kth)


def test_topk_auxk_trains_only_dead_latents_from_the_residual():
    sae = _sae("topk", k=4)
    x = _x()
    sae.dead_mask[:10] = True
    sae.zero_grad()
    out = sae.loss(x)
    out.terms["auxk"].backward()
    assert torch.count_nonzero(sae.W_dec.grad[10:]) == 0
    assert torch.count_nonzero(sae.W_dec.grad[:10]) > 0
    assert torch.count_nonzero(sae.W_enc.grad[:, 10:]) == 0
    assert torch.count_nonzero(sae.W_enc.grad[:, :10]) > 0


def test_loss_recovered_arithmetic():
    assert loss_recovered(ce_clean=2.0, ce_sae=2.3, ce_zero=5.0) == pytest.approx(0.9)


def test_jumprelu_threshold_gradient_is_straight_through():
    """Threshold gets the kernel pseudo-gradient; the L0 term does not move the encoder."""
    sae = _sae("jumprelu")
    with torch.no_grad():
        sae.threshold.fill_(0.5)
    sae.bandwidth = 2.0
    x = _x()
    l0_grads = _grads(sae, "sparsity", x)
    assert torch.count_nonzero(l0_grads["W_enc"]) == 0 and torch.count_nonzero(l0_grads["b_enc"]) == 0
    assert (l0_grads["threshold"] <= 0).all() and (l0_grads["threshold"] < 0).any()
    z = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    in_window = ((z - 0.5).abs() < 1.0).double().sum(0)
    torch.testing.assert_close(l0_grads["threshold"], -0.7 * in_window / 2.0 / x.shape[0])


def test_architecture_names():
    assert canonical_architecture("relu") == "standard"
    with pytest.raises(ValueError, match="Unknown SAE architecture"):
        canonical_architecture("crosscoder")
