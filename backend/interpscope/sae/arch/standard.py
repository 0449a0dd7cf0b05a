"""Standard (ReLU) SAE: f = ReLU((x - b_dec) W_enc + b_enc), loss = ||x - x_hat||^2 + l1 * ||f||_1."""
from __future__ import annotations

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder, squared_error


class StandardSAE(SparseAutoencoder):
    """ReLU SAE with an L1 penalty on the feature activations."""

    architecture = "standard"
    aliases = ("standard", "relu")
    short_name = "relu"
    label = "ReLU (L1)"
    knob = Knob("l1", "L1 coefficient", 5.0)
    selected_by_default = True
    per_feature = {"b_enc": PerFeature()}
    density_bias = "b_enc"
    folder_architecture = "standard"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        return torch.relu(sae_in @ self.W_enc + self.b_enc)

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        f = torch.relu(self._linear(self.centred(x)) + self.b_enc)
        x_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(x, x_hat)
        sparsity = coefficient * f.abs().sum(-1).mean()
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, x_hat)
