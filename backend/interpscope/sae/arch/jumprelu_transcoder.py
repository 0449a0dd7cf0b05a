"""JumpReLU transcoder: a transcoder (interpscope.sae.arch.transcoder: reads one activation, predicts another) whose
features are JumpReLUs, optionally with a linear skip connection; the dictionaries Gemma Scope 2 releases for every
layer of Gemma 3 (plain, and `_affine` with the skip).

f = JumpReLU(x_in W_enc + b_enc, threshold) = ReLU(z) * 1[z > threshold]; y_hat = f W_dec + b_dec (+ x_in W_skip when
cfg.extra["skip"] is true). W_enc [d_in, d_sae], W_dec [d_sae, d_out], b_enc and threshold [d_sae], b_dec [d_out],
W_skip [d_in, d_out] in memory (started at zero and trained with the rest).

Training: paired rows [x_in | y] as for a transcoder; loss ||y - y_hat||^2 + l0 * L0(f), the threshold learnt through
the same straight-through estimators as the JumpReLU SAE's (interpscope.sae.arch.jumprelu) and kept non-negative.

The skip term needs the input: `decode(f, x_in)` adds it; `decode(f)` alone adds it from the input of this SAE's last
`encode` in this thread (encode then decode, as a spliced pass does), and refuses when the shapes do not match.

Folders: SAELens's names, `"architecture": "jumprelu_transcoder"` or `"jumprelu_skip_transcoder"` (the skip is read
from that name), with the transcoder's d_out / hook_name_out fields; in the file W_skip is stored [d_out, d_in] as that
library keeps it (x @ W_skip.T), so it is transposed on the way in and out.
"""
from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, squared_error
from interpscope.sae.arch.jumprelu import (
    INITIAL_THRESHOLD,
    THRESHOLD_LR_SCALE,
    JumpReLUSAE,
    _JumpReLUWithThresholdGrad,
    _StepWithThresholdGrad,
)
from interpscope.sae.arch.transcoder import Transcoder

SKIP_FOLDER_ARCHITECTURE = "jumprelu_skip_transcoder"

_last_input = threading.local()


class JumpReLUTranscoder(Transcoder):
    """JumpReLU transcoder with an L0 penalty, optionally with a trained skip connection x_in W_skip."""

    architecture = "jumprelu_transcoder"
    aliases = ("jumprelu_transcoder", SKIP_FOLDER_ARCHITECTURE)
    short_name = "jumprelu_transcoder"
    label = "JumpReLU transcoder (L0)"
    knob = Knob("l0", "L0 coefficient", 0.5)
    per_feature = {"b_enc": PerFeature(), "threshold": PerFeature(reset=INITIAL_THRESHOLD)}
    lr_scale = {"threshold": THRESHOLD_LR_SCALE}
    folder_architecture = "jumprelu_transcoder"

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0,
                 bandwidth: float = 0.1):
        cfg.extra.setdefault("skip", False)
        super().__init__(cfg, dtype, seed)
        self.threshold = nn.Parameter(torch.full((cfg.d_sae,), INITIAL_THRESHOLD, dtype=dtype))
        self.bandwidth = float(cfg.extra.get("bandwidth", bandwidth))
        if self.skip:
            self.W_skip = nn.Parameter(torch.zeros(cfg.d_in, self.d_out, dtype=dtype))

    # --- facts ---------------------------------------------------------------------------------------------
    @property
    def skip(self) -> bool:
        return bool(self.cfg.extra.get("skip"))

    @classmethod
    def check_config(cls, cfg: SAEConfig) -> None:
        super().check_config(cfg)
        if not isinstance(cfg.extra.get("skip", False), bool):
            raise ValueError(f"A JumpReLU transcoder's skip must be true or false (got {cfg.extra['skip']!r}).")

    @classmethod
    def tensor_shapes(cls, cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
        shapes = super().tensor_shapes(cfg)
        shapes["threshold"] = (cfg.d_sae,)
        if cfg.extra.get("skip"):
            shapes["W_skip"] = (cfg.d_in, int(cfg.extra["d_out"]))
        return shapes

    @classmethod
    def read_fields(cls, raw: dict) -> dict[str, Any]:
        fields = super().read_fields(raw)
        fields["extra"]["skip"] = raw.get("architecture") == SKIP_FOLDER_ARCHITECTURE
        return fields

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict[str, Any]:
        fields = super().write_fields(cfg)
        if cfg.extra.get("skip"):
            fields["architecture"] = SKIP_FOLDER_ARCHITECTURE
        return fields

    @classmethod
    def prepare_tensors(cls, raw: dict, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """log_threshold read as JumpReLU SAEs read it; W_skip from the file's [d_out, d_in] to [d_in, d_out]."""
        tensors = dict(JumpReLUSAE.prepare_tensors(raw, tensors))
        if "W_skip" in tensors:
            if tensors["W_skip"].dim() != 2:
                raise ValueError(f"W_skip has shape {tuple(tensors['W_skip'].shape)}; it must be a matrix "
                                 "[d_out, d_in].")
            tensors["W_skip"] = tensors["W_skip"].T.contiguous()
        return tensors

    def folder_tensors(self) -> dict[str, torch.Tensor]:
        tensors = super().folder_tensors()
        if "W_skip" in tensors:
            tensors["W_skip"] = tensors["W_skip"].T.contiguous()
        return tensors

    # --- inference -----------------------------------------------------------------------------------------
    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        z = sae_in @ self.W_enc + self.b_enc
        return torch.relu(z) * (z > self.threshold).to(z.dtype)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        if self.skip:  # the skip term of a following decode(f) reads this input
            records = getattr(_last_input, "records", None)
            if records is None:
                records = _last_input.records = {}
            records[id(self)] = x.detach()
        return super().encode(x)

    def skip_term(self, x_in: torch.Tensor) -> torch.Tensor:
        """x_in W_skip (zeros without a skip connection): the linear part of the prediction."""
        if not self.skip:
            return torch.zeros(*x_in.shape[:-1], self.d_out, dtype=self.W_dec.dtype, device=self.W_dec.device)
        return x_in.to(self.W_skip.dtype) @ self.W_skip

    def decode(self, features: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """f W_dec + b_dec, plus x W_skip with a skip connection (x: the input; default: the last encode's)."""
        y = features @ self.W_dec + self.b_dec
        if not self.skip:
            return y
        if x is None:
            x = getattr(_last_input, "records", {}).get(id(self))
            if x is None or x.shape[:-1] != features.shape[:-1]:
                raise ValueError("This transcoder has a skip connection: decoding needs the input it reads; call "
                                 "forward(x_in), or decode(features, x_in).")
        return y + self.skip_term(x)

    # --- training on paired rows [x_in | y] ---------------------------------------------------------------
    @torch.no_grad()
    def init_from_batch(self, x: torch.Tensor, density: float = 0.03) -> None:
        """The transcoder's data-aware start; where it rescales a feature's encoder column (moving a decoder norm
        into it), the threshold is rescaled alike, so the JumpReLU gate keeps its place (ReLU(a z) = a ReLU(z), and
        a z > a theta exactly when z > theta)."""
        before = self.W_enc.norm(dim=0).clone()
        super().init_from_batch(x, density)
        after = self.W_enc.norm(dim=0)
        scale = torch.where(before > 0, after / before.clamp_min(1e-30), torch.ones_like(before))
        self.threshold.mul_(scale)

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        x_in, y = self.split(x)
        z = self._linear(x_in) + self.b_enc
        f = _JumpReLUWithThresholdGrad.apply(z, self.threshold, self.bandwidth)
        y_hat = f @ self.W_dec + self.b_dec  # dense: the threshold's gradient reads rows where f == 0
        if self.skip:
            y_hat = y_hat + x_in @ self.W_skip
        recon = squared_error(y, y_hat)
        l0 = _StepWithThresholdGrad.apply(z, self.threshold, self.bandwidth).sum(-1).mean()
        sparsity = coefficient * l0
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, y_hat)

    @torch.no_grad()
    def after_step(self, out: LossTerms) -> None:
        """Thresholds stay non-negative while training."""
        self.threshold.clamp_(min=0.0)
