"""Gated SAE (Rajamanoharan et al. 2024), docs/methods/sae.md.

Gate 1[pi > 0] with pi = (x - b_dec) W_enc + b_gate; magnitude ReLU(exp(r_mag) * (x - b_dec) W_enc + b_mag);
loss = recon + l1 * ||ReLU(pi)||_1 + aux, where aux reconstructs x from ReLU(pi) through a *frozen* (detached)
decoder. Folding decoder norms scales b_gate and b_mag with the norm and leaves r_mag as it is.
"""
from __future__ import annotations

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder, squared_error


class GatedSAE(SparseAutoencoder):
    """Gate and magnitude paths share W_enc; the paper's loss with a frozen-decoder auxiliary term."""

    architecture = "gated"
    aliases = ("gated",)
    short_name = "gated"
    label = "Gated"
    knob = Knob("l1", "L1 coefficient", 5.0)
    selected_by_default = True
    per_feature = {"b_gate": PerFeature(), "r_mag": PerFeature(fold=False), "b_mag": PerFeature()}
    density_bias = "b_gate"
    folder_architecture = "gated"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.b_gate = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.r_mag = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.b_mag = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))

    def _paths(self, shared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return shared + self.b_gate, shared * torch.exp(self.r_mag) + self.b_mag

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        pi_gate, pi_mag = self._paths(sae_in @ self.W_enc)
        return (pi_gate > 0).to(pi_mag.dtype) * torch.relu(pi_mag)

    def jumprelu_threshold(self) -> torch.Tensor:
        """theta = b_mag - exp(r_mag) * b_gate: the gate opens exactly where pi_mag exceeds theta."""
        return self.b_mag - torch.exp(self.r_mag) * self.b_gate

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        pi_gate, pi_mag = self._paths(self._linear(self.centred(x)))
        f = (pi_gate > 0).to(pi_mag.dtype) * torch.relu(pi_mag)
        x_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(x, x_hat)
        gate_act = torch.relu(pi_gate)
        sparsity = coefficient * gate_act.sum(-1).mean()
        x_hat_frozen = self._decode_rows(gate_act, self.W_dec.detach()) + self.b_dec.detach()
        aux = squared_error(x, x_hat_frozen)
        return LossTerms(recon + sparsity + aux, {"recon": recon, "sparsity": sparsity, "aux": aux}, f, x_hat)
