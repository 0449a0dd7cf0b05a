"""BatchTopK SAE (Bussmann et al. 2024, "BatchTopK Sparse Autoencoders").

Training keeps the k x batch_size largest ReLU'd pre-activations across the WHOLE batch (rows share the budget,
so L0 is k on average), with AuxK for dead latents as TopK. A global threshold theta is estimated meanwhile as a
running average (rate 0.01, as the common SAE library) of the smallest activation each batch keeps; the first
batch sets it directly, so short runs are not biased towards 0. Inference is a JumpReLU with that one threshold:
f = ReLU(z) * 1[z > theta], z = (x - b_dec) W_enc + b_enc, independent of the other rows.

Folders: saved as the common library saves a trained BatchTopK SAE, i.e. as a JumpReLU (`"architecture":
"jumprelu"`, `threshold` = theta for every feature), so that library reads it as is; `metadata.interpscope.
architecture = "batchtopk"` records the provenance and `k` the training budget. The library's own training
checkpoints (`"architecture": "batchtopk"`, a scalar `topk_threshold`, rescale_acts_by_decoder_norm) are read too.
"""
from __future__ import annotations

import torch

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig
from interpscope.sae.arch.topk import TopKSAE, fold_norms_into_encoder

THRESHOLD_RATE = 0.01


class BatchTopKSAE(TopKSAE):
    """TopK over the whole batch while training; a JumpReLU with one learnt global threshold at inference."""

    architecture = "batchtopk"
    aliases = ("batchtopk", "batch-topk")
    short_name = "batchtopk"
    label = "BatchTopK (AuxK)"
    knob = Knob("k", "k (features per token, batch average)", 32)
    per_feature = {"b_enc": PerFeature(fold=None), "threshold": PerFeature(fold=None)}
    folder_architecture = "jumprelu"
    activation_fn = "relu"

    threshold: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.register_buffer("threshold", torch.zeros(cfg.d_sae, dtype=dtype))

    @classmethod
    def claims_folder(cls, raw: dict, pre_6: bool) -> bool:
        return False

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict:
        return {"activation_fn_str": "relu", "activation_fn_kwargs": {}, "k": cfg.k}

    @classmethod
    def prepare_tensors(cls, raw: dict, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        tensors = dict(tensors)
        if "topk_threshold" in tensors and "threshold" not in tensors:
            value = tensors.pop("topk_threshold")
            if value.numel() != 1:
                raise ValueError(f"topk_threshold must hold one number (it has shape {tuple(value.shape)}).")
            tensors["threshold"] = torch.full_like(tensors["b_enc"], float(value))
        if raw.get("rescale_acts_by_decoder_norm", False) is True:
            tensors = fold_norms_into_encoder(tensors, ("b_enc",))
        threshold = tensors.get("threshold")
        if threshold is not None and threshold.numel() and bool((threshold != threshold.flatten()[0]).any()):
            raise ValueError("threshold differs between features, but a BatchTopK SAE has one global threshold; "
                             "read the folder as a JumpReLU SAE (drop metadata.interpscope.architecture).")
        return tensors

    def keep_top_in_training(self, pre: torch.Tensor) -> torch.Tensor:
        """ReLU, then the k x rows largest activations of the whole batch; zero elsewhere."""
        acts = torch.relu(pre)
        flat = acts.flatten()
        keep = min(flat.numel(), self.top_k * acts[..., 0].numel())
        values, index = flat.topk(keep)
        return torch.zeros_like(flat).scatter(0, index, values).view_as(acts)

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        z = sae_in @ self.W_enc + self.b_enc
        return torch.relu(z) * (z > self.threshold).to(z.dtype)

    @torch.no_grad()
    def after_step(self, out: LossTerms) -> None:
        """theta <- (1 - rate) theta + rate * (smallest activation the batch kept); the first batch sets it."""
        kept = out.features[out.features > 0]
        if kept.numel() == 0:
            return
        smallest = kept.min().to(self.threshold.dtype)
        current = self.threshold[0]
        self.threshold.fill_(smallest if current == 0 else (1 - THRESHOLD_RATE) * current + THRESHOLD_RATE * smallest)
