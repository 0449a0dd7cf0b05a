"""JumpReLU SAE: f = ReLU(z) * 1[z > threshold], z = (x - b_dec) W_enc + b_enc (the common library's inference;
with a non-negative threshold the ReLU changes nothing, with a negative one it keeps outputs non-negative).

Training: an L0 penalty; the threshold learns through straight-through estimators with a rectangle kernel of
width `bandwidth` and is kept non-negative after every step. Folders of the common library that store
`log_threshold` (older checkpoints) are read as threshold = exp(log_threshold), as that library does.
"""
from __future__ import annotations

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder, squared_error

INITIAL_THRESHOLD = 0.1
THRESHOLD_LR_SCALE = 20.0


class _StepWithThresholdGrad(torch.autograd.Function):
    """H(z - theta) forward; pseudo-gradient -(1/eps) K((z - theta)/eps) for theta, zero for z."""

    @staticmethod
    def forward(ctx, z, theta, bandwidth):
        ctx.save_for_backward(z, theta)
        ctx.bandwidth = bandwidth
        return (z > theta).to(z.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        z, theta = ctx.saved_tensors
        eps = ctx.bandwidth
        kernel = ((z - theta).abs() < eps / 2).to(z.dtype)
        grad_theta = (-(1.0 / eps) * kernel * grad_out).sum(dim=tuple(range(z.dim() - 1)))
        return torch.zeros_like(z), grad_theta, None


class _JumpReLUWithThresholdGrad(torch.autograd.Function):
    """z * H(z - theta) forward; gradient H(z - theta) for z, -(theta/eps) K((z - theta)/eps) for theta."""

    @staticmethod
    def forward(ctx, z, theta, bandwidth):
        ctx.save_for_backward(z, theta)
        ctx.bandwidth = bandwidth
        return z * (z > theta).to(z.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        z, theta = ctx.saved_tensors
        eps = ctx.bandwidth
        gate = (z > theta).to(z.dtype)
        kernel = ((z - theta).abs() < eps / 2).to(z.dtype)
        grad_theta = (-(theta / eps) * kernel * grad_out).sum(dim=tuple(range(z.dim() - 1)))
        return gate * grad_out, grad_theta, None


class JumpReLUSAE(SparseAutoencoder):
    """JumpReLU SAE with an L0 penalty; threshold learnt by straight-through estimation."""

    architecture = "jumprelu"
    aliases = ("jumprelu",)
    short_name = "jumprelu"
    label = "JumpReLU (L0)"
    knob = Knob("l0", "L0 coefficient", 0.5)
    per_feature = {"b_enc": PerFeature(), "threshold": PerFeature(reset=INITIAL_THRESHOLD)}
    # Adam moves a parameter about lr per step: at the run's lr (7e-4 over a few hundred steps) a threshold could
    # travel ~0.2, far short of the pre-activations' O(1) scale, and every L0 coefficient gave the same L0 (~300 of 576)
    lr_scale = {"threshold": THRESHOLD_LR_SCALE}
    folder_architecture = "jumprelu"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0,
                 bandwidth: float = 0.1):
        super().__init__(cfg, dtype, seed)
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.threshold = nn.Parameter(torch.full((cfg.d_sae,), INITIAL_THRESHOLD, dtype=dtype))
        self.bandwidth = float(cfg.extra.get("bandwidth", bandwidth))

    @classmethod
    def prepare_tensors(cls, raw: dict, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if "log_threshold" in tensors and "threshold" not in tensors:
            tensors = dict(tensors)
            tensors["threshold"] = torch.exp(tensors.pop("log_threshold").double()).to(tensors["W_enc"].dtype)
        return tensors

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        z = sae_in @ self.W_enc + self.b_enc
        return torch.relu(z) * (z > self.threshold).to(z.dtype)

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        z = self._linear(self.centred(x)) + self.b_enc
        f = _JumpReLUWithThresholdGrad.apply(z, self.threshold, self.bandwidth)
        x_hat = f @ self.W_dec + self.b_dec  # dense: the threshold's gradient reads rows where f == 0
        recon = squared_error(x, x_hat)
        l0 = _StepWithThresholdGrad.apply(z, self.threshold, self.bandwidth).sum(-1).mean()
        sparsity = coefficient * l0
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, x_hat)

    @torch.no_grad()
    def after_step(self, out: LossTerms) -> None:
        """Thresholds stay non-negative while training."""
        self.threshold.clamp_(min=0.0)
