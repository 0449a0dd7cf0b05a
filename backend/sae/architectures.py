"""Four sparse autoencoders behind one interface: encode, decode, forward, loss.

Parameter names and shapes follow the common SAE library (SAELens) so folders move between the two:
W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_dec [d_in], plus b_enc (standard, TopK, JumpReLU), threshold
(JumpReLU), and b_gate, r_mag, b_mag (Gated). Every architecture subtracts b_dec from its input first.

- standard (ReLU): f = ReLU((x - b_dec) W_enc + b_enc), loss = ||x - x_hat||^2 + l1 * ||f||_1.
- gated (Rajamanoharan et al. 2024): gate 1[pi > 0] with pi = (x - b_dec) W_enc + b_gate, magnitude
  ReLU(exp(r_mag) * (x - b_dec) W_enc + b_mag); loss = recon + l1 * ||ReLU(pi)||_1 + aux, where aux
  reconstructs x from ReLU(pi) through a *frozen* (detached) decoder.
- topk: keep the k largest pre-activations (then ReLU); AuxK reconstructs the residual from the top dead latents.
- jumprelu: f = z * 1[z > threshold], z = (x - b_dec) W_enc + b_enc; the L0 penalty and the threshold learn
  through straight-through estimators with a rectangle kernel of width `bandwidth`.
Losses are sums over the feature/model dimension, averaged over the batch (the paper's convention).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from backend.sae.sparse_ops import sparse_decode, sparse_linear

ARCHITECTURES = ("standard", "gated", "topk", "jumprelu")
ALIASES = {"relu": "standard", "standard": "standard", "gated": "gated", "topk": "topk", "jumprelu": "jumprelu"}


@dataclass
class SAEConfig:
    """What an SAE is and where it reads: the fields the common SAE library writes in cfg.json."""

    d_in: int
    d_sae: int
    architecture: str = "standard"
    model_name: str = ""
    hook_name: str = ""
    hook_layer: int = -1
    dtype: str = "float32"
    k: int | None = None
    context_size: int = 128
    dataset_path: str = ""
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"
    prepend_bos: bool = False
    training_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LossTerms:
    """The total loss and its named parts (floats are detached copies for logging)."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    features: torch.Tensor
    x_hat: torch.Tensor


def squared_error(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """||x - x_hat||^2 summed over the model dimension, averaged over rows."""
    return (x - x_hat).pow(2).sum(-1).mean()


class SparseAutoencoder(nn.Module):
    """Base class: a linear decoder with unit-norm-able rows; subclasses define the encoder and sparsity loss."""

    architecture = "standard"
    encoder_bias_names: tuple[str, ...] = ("b_enc",)
    sparse_training = False  # exact sparse-aware kernels in loss() (see sparse_ops); same values and gradients

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__()
        self.cfg = cfg
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        W_dec = torch.randn(cfg.d_sae, cfg.d_in, generator=generator, dtype=torch.float64)
        W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(W_dec.to(dtype))
        self.W_enc = nn.Parameter(W_dec.T.clone().to(dtype))
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in, dtype=dtype))

    # --- interface -------------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, features: torch.Tensor) -> torch.Tensor:
        return features @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    def loss(self, x: torch.Tensor, l1: float = 1.0) -> LossTerms:
        raise NotImplementedError

    # --- helpers ---------------------------------------------------------------------------------------
    def centred(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.b_dec if self.cfg.apply_b_dec_to_input else x

    def _linear(self, xc: torch.Tensor) -> torch.Tensor:
        return sparse_linear(xc, self.W_enc) if self.sparse_training and xc.dim() == 2 else xc @ self.W_enc

    def _decode_rows(self, f: torch.Tensor, W_dec: torch.Tensor | None = None) -> torch.Tensor:
        """f @ W_dec without bias (W_dec may be a detached copy); used by the training losses."""
        W = self.W_dec if W_dec is None else W_dec
        return sparse_decode(f, W) if self.sparse_training and f.dim() == 2 else f @ W

    def encoder_params_of_feature(self) -> list[str]:
        """Per-feature parameters along dim 0 (besides W_enc columns and W_dec rows), for resampling/folding."""
        return list(self.encoder_bias_names)

    @torch.no_grad()
    def fold_decoder_norms(self) -> None:
        """Scale W_dec rows to unit norm and move the norms into the encoder: x_hat is unchanged."""
        norms = self.W_dec.norm(dim=1)
        self.W_dec.div_(norms[:, None])
        self.W_enc.mul_(norms[None, :])
        for name in self.encoder_params_of_feature():
            if name in ("b_enc", "b_gate", "b_mag", "threshold"):
                getattr(self, name).mul_(norms)

    @torch.no_grad()
    def init_from_batch(self, x: torch.Tensor, density: float = 0.03) -> None:
        """Data-aware start: b_dec = batch mean; for ReLU and Gated, encoder biases set so each feature fires on
        about `density` of the batch, so training starts sparse, where the sparse kernels are cheap. JumpReLU
        starts dense (threshold 0.001) and lets its L0 penalty prune, as in its paper; TopK needs no bias."""
        self.b_dec.copy_(x.mean(0))
        if self.architecture not in ("standard", "gated"):
            return
        pre = self.centred(x) @ self.W_enc
        k = max(1, min(x.shape[0], int(round((1 - density) * x.shape[0]))))
        cut = pre.kthvalue(k, dim=0).values
        getattr(self, "b_gate" if self.architecture == "gated" else "b_enc").copy_(-cut)

    @torch.no_grad()
    def fold_input_scale(self, scale: float) -> None:
        """An SAE trained on x * scale becomes one that reads raw x and writes raw x_hat."""
        self.W_enc.mul_(scale)
        self.b_dec.div_(scale)
        self.W_dec.div_(scale)

    @torch.no_grad()
    def reinit_features(self, index: torch.Tensor, directions: torch.Tensor, enc_norm: float) -> None:
        """Resample features `index`: decoder rows = unit `directions`, encoder columns = enc_norm * directions."""
        directions = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        self.W_dec[index] = directions.to(self.W_dec.dtype)
        self.W_enc[:, index] = (directions.T * enc_norm).to(self.W_enc.dtype)
        for name in self.encoder_params_of_feature():
            getattr(self, name)[index] = 0.0


class StandardSAE(SparseAutoencoder):
    """ReLU SAE with an L1 penalty on the feature activations."""

    architecture = "standard"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.centred(x) @ self.W_enc + self.b_enc)

    def loss(self, x: torch.Tensor, l1: float = 1.0) -> LossTerms:
        f = torch.relu(self._linear(self.centred(x)) + self.b_enc)
        x_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(x, x_hat)
        sparsity = l1 * f.abs().sum(-1).mean()
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, x_hat)


class GatedSAE(SparseAutoencoder):
    """Gated SAE: gate and magnitude paths share W_enc; the paper's loss with a frozen-decoder auxiliary term."""

    architecture = "gated"
    encoder_bias_names = ("b_gate", "r_mag", "b_mag")

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.b_gate = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.r_mag = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.b_mag = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))

    def _paths(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shared = self._linear(self.centred(x))
        return shared + self.b_gate, shared * torch.exp(self.r_mag) + self.b_mag

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pi_gate, pi_mag = self._paths(x)
        return (pi_gate > 0).to(pi_mag.dtype) * torch.relu(pi_mag)

    def jumprelu_threshold(self) -> torch.Tensor:
        """theta = b_mag - exp(r_mag) * b_gate: the gate opens exactly where pi_mag exceeds theta."""
        return self.b_mag - torch.exp(self.r_mag) * self.b_gate

    def loss(self, x: torch.Tensor, l1: float = 1.0) -> LossTerms:
        pi_gate, pi_mag = self._paths(x)
        f = (pi_gate > 0).to(pi_mag.dtype) * torch.relu(pi_mag)
        x_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(x, x_hat)
        gate_act = torch.relu(pi_gate)
        sparsity = l1 * gate_act.sum(-1).mean()
        x_hat_frozen = self._decode_rows(gate_act, self.W_dec.detach()) + self.b_dec.detach()
        aux = squared_error(x, x_hat_frozen)
        return LossTerms(recon + sparsity + aux, {"recon": recon, "sparsity": sparsity, "aux": aux}, f, x_hat)

    @torch.no_grad()
    def fold_decoder_norms(self) -> None:
        """Folding for gated: W_enc columns and b_gate scale with the norm; b_mag too; r_mag is unchanged."""
        norms = self.W_dec.norm(dim=1)
        self.W_dec.div_(norms[:, None])
        self.W_enc.mul_(norms[None, :])
        self.b_gate.mul_(norms)
        self.b_mag.mul_(norms)


class TopKSAE(SparseAutoencoder):
    """TopK SAE: exactly the k largest pre-activations survive (then ReLU); AuxK revives dead latents."""

    architecture = "topk"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        if not cfg.k or cfg.k < 1 or cfg.k > cfg.d_sae:
            raise ValueError(f"TopK SAE needs 1 <= k <= d_sae (got k={cfg.k}, d_sae={cfg.d_sae}).")
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.register_buffer("dead_mask", torch.zeros(cfg.d_sae, dtype=torch.bool), persistent=False)
        self.aux_k = min(cfg.d_in // 2, cfg.d_sae)
        self.aux_coefficient = 1.0 / 32.0

    def fold_decoder_norms(self) -> None:
        """Not exact for TopK (rescaling features changes which k win); training keeps the rows unit norm."""
        raise ValueError("Folding decoder norms changes a TopK SAE's selection; it is kept unit-norm instead.")

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(self.centred(x)) + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_activations(x)
        values, index = pre.topk(int(self.cfg.k), dim=-1)
        return torch.zeros_like(pre).scatter(-1, index, torch.relu(values))

    def loss(self, x: torch.Tensor, l1: float = 0.0) -> LossTerms:
        pre = self.pre_activations(x)
        values, index = pre.topk(int(self.cfg.k), dim=-1)
        f = torch.zeros_like(pre).scatter(-1, index, torch.relu(values))
        x_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(x, x_hat)
        terms = {"recon": recon}
        total = recon
        n_dead = int(self.dead_mask.sum())
        if n_dead > 0:
            k_aux = min(self.aux_k, n_dead)
            dead_pre = pre.masked_fill(~self.dead_mask, float("-inf"))
            aux_values, aux_index = dead_pre.topk(k_aux, dim=-1)
            f_aux = torch.zeros_like(pre).scatter(-1, aux_index, torch.relu(aux_values))
            residual = (x - x_hat).detach()
            aux = self.aux_coefficient * squared_error(residual, self._decode_rows(f_aux))
            terms["auxk"] = aux
            total = total + aux
        return LossTerms(total, terms, f, x_hat)


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
    encoder_bias_names = ("b_enc", "threshold")

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0,
                 initial_threshold: float = 0.001, bandwidth: float = 0.001):
        super().__init__(cfg, dtype, seed)
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.threshold = nn.Parameter(torch.full((cfg.d_sae,), initial_threshold, dtype=dtype))
        self.bandwidth = float(cfg.extra.get("bandwidth", bandwidth))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        z = self.centred(x) @ self.W_enc + self.b_enc
        return z * (z > self.threshold).to(z.dtype)

    def loss(self, x: torch.Tensor, l1: float = 1.0) -> LossTerms:
        z = self._linear(self.centred(x)) + self.b_enc
        f = _JumpReLUWithThresholdGrad.apply(z, self.threshold, self.bandwidth)
        x_hat = self.decode(f)
        recon = squared_error(x, x_hat)
        l0 = _StepWithThresholdGrad.apply(z, self.threshold, self.bandwidth).sum(-1).mean()
        sparsity = l1 * l0
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, x_hat)

    @torch.no_grad()
    def reinit_features(self, index: torch.Tensor, directions: torch.Tensor, enc_norm: float) -> None:
        super().reinit_features(index, directions, enc_norm)
        self.threshold[index] = 0.001


CLASSES: dict[str, type[SparseAutoencoder]] = {
    "standard": StandardSAE, "gated": GatedSAE, "topk": TopKSAE, "jumprelu": JumpReLUSAE,
}


def canonical_architecture(name: str) -> str:
    """'relu' and 'standard' mean the same; raise ValueError for anything unknown."""
    key = (name or "standard").lower()
    if key not in ALIASES:
        raise ValueError(f"Unknown SAE architecture {name!r}: choose relu (standard), gated, topk or jumprelu.")
    return ALIASES[key]


def build_sae(cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0) -> SparseAutoencoder:
    """A freshly initialised SAE of cfg.architecture (decoder rows unit norm, encoder = decoder transpose)."""
    cfg.architecture = canonical_architecture(cfg.architecture)
    return CLASSES[cfg.architecture](cfg, dtype=dtype, seed=seed)
