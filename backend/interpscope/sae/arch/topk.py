"""TopK SAE: keep the k largest pre-activations of each row (then ReLU); AuxK reconstructs the residual from the
top dead latents (coefficient 1/32, k_aux = min(d_in / 2, d_sae)); no resampling.

Folders: `k` (or, in the common library's layout before 6.0, `"architecture": "standard"` with
`activation_fn_str: "topk"` and `activation_fn_kwargs.k`). With `rescale_acts_by_decoder_norm: true` (that library's
trainer default) it computes pre-activations times ||W_dec[i]|| and decodes f / ||W_dec[i]||; reading such a folder
folds the norms into W_enc and b_enc (in float64), which gives the same features and reconstructions with unit
decoder rows.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder, squared_error

AUX_COEFFICIENT = 1.0 / 32.0


def fold_norms_into_encoder(tensors: dict[str, torch.Tensor], per_feature: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """W_enc columns and the named per-feature tensors times ||W_dec[i]||, W_dec rows divided by it (float64)."""
    dtype = tensors["W_enc"].dtype
    norms = tensors["W_dec"].double().norm(dim=1)
    folded = dict(tensors)
    folded["W_enc"] = (tensors["W_enc"].double() * norms[None, :]).to(dtype)
    folded["W_dec"] = (tensors["W_dec"].double() / norms.clamp_min(1e-8)[:, None]).to(dtype)
    for name in per_feature:
        folded[name] = (tensors[name].double() * norms).to(dtype)
    return folded


def _positive_int(value, name: str) -> int:
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
    if not number == number or number < 1 or number != int(number):
        raise ValueError(f"cfg.json field {name} must be a positive whole number (got {value!r}).")
    return int(number)


class TopKSAE(SparseAutoencoder):
    """Exactly the k largest pre-activations survive (then ReLU); AuxK revives dead latents."""

    architecture = "topk"
    aliases: ClassVar[tuple[str, ...]] = ("topk",)
    short_name = "topk"
    label = "TopK (AuxK)"
    knob = Knob("k", "k (features per token)", 32)
    per_feature = {"b_enc": PerFeature(fold=None)}
    resample_dead = False
    folder_architecture = "topk"
    activation_fn = "topk"

    dead_mask: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__(cfg, dtype, seed)
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))
        self.register_buffer("dead_mask", torch.zeros(cfg.d_sae, dtype=torch.bool), persistent=False)
        self.aux_k = min(cfg.d_in // 2, cfg.d_sae)
        self.aux_coefficient = AUX_COEFFICIENT

    # --- folder format -----------------------------------------------------------------------------------
    @classmethod
    def claims_folder(cls, raw: dict, pre_6: bool) -> bool:
        """The library's layout before 6.0: a 'standard' SAE whose activation function is topk with a k."""
        activation = raw.get("activation_fn_str", raw.get("activation_fn"))
        k = (raw.get("activation_fn_kwargs") or {}).get("k")
        return pre_6 and activation == "topk" and k is not None and raw.get("architecture") in (None, "standard")

    @classmethod
    def read_fields(cls, raw: dict) -> dict:
        k, legacy = raw.get("k"), (raw.get("activation_fn_kwargs") or {}).get("k")
        if k is not None and legacy is not None and k != legacy:
            raise ValueError(f"cfg.json fields k ({k!r}) and activation_fn_kwargs.k ({legacy!r}) disagree; the "
                             "common library reads one or the other depending on its version.")
        if k is None and legacy is None:
            raise ValueError(f"cfg.json of a {cls.label} SAE names no k (field k or activation_fn_kwargs.k).")
        return {"k": _positive_int(k, "k") if k is not None else _positive_int(legacy, "activation_fn_kwargs.k")}

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict:
        return {"activation_fn_str": "topk", "activation_fn_kwargs": {"k": cfg.k}, "k": cfg.k,
                "rescale_acts_by_decoder_norm": False}

    @classmethod
    def prepare_tensors(cls, raw: dict, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rescale = raw.get("rescale_acts_by_decoder_norm", False)
        if not isinstance(rescale, bool):
            raise ValueError(f"cfg.json field rescale_acts_by_decoder_norm must be true or false (got {rescale!r}).")
        return fold_norms_into_encoder(tensors, ("b_enc",)) if rescale else tensors

    # --- inference and training --------------------------------------------------------------------------
    @property
    def top_k(self) -> int:
        """cfg.k, which construction checked (1 <= k <= d_sae)."""
        if self.cfg.k is None:
            raise ValueError(f"A {self.label} SAE needs k.")
        return int(self.cfg.k)

    def keep_top(self, pre: torch.Tensor) -> torch.Tensor:
        """ReLU of the k largest entries of each row, zero elsewhere."""
        values, index = pre.topk(self.top_k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, index, torch.relu(values))

    def keep_top_in_training(self, pre: torch.Tensor) -> torch.Tensor:
        return self.keep_top(pre)

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        return self.keep_top(sae_in @ self.W_enc + self.b_enc)

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(self.centred(x)) + self.b_enc

    def observe_dead(self, dead: torch.Tensor) -> None:
        self.dead_mask.copy_(dead)

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        pre = self.pre_activations(x)
        f = self.keep_top_in_training(pre)
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
