"""Transcoder (Dunefsky et al. 2024, "Transcoders Find Interpretable LLM Feature Circuits"): a sparse layer that
reads one activation and predicts ANOTHER, here an MLP's input mapped to its output, so the MLP can be replaced by
sparse, interpretable features in a circuit.

f = ReLU(x_in W_enc + b_enc), y_hat = f W_dec + b_dec; loss ||y - y_hat||^2 + l1 * ||f||_1 (decoder rows unit
norm). Nothing is subtracted from the input (b_dec lives in the output space), as in SAELens.
Hooks: the input is `blocks.L.hook_resid_mid` (the residual stream the MLP block reads, before its own RMSNorm)
and the target `blocks.L.hook_mlp_out`, the pair circuit-tracer's transcoders name (feature_input_hook
hook_resid_mid, feature_output_hook hook_mlp_out); the normalisation is then part of what the transcoder learns.

Training rows are the pair side by side, [x_in | y] (width d_in + d_out, one activation cache of paired rows,
interpscope.sae.activations), so the trainer and the shuffled buffer serve a transcoder as any SAE; the loss splits
them. A transcoder is not resampled (resample_dead False): its dead features stay dead and are counted.

Folders: SAELens's transcoder format, `"architecture": "transcoder"` with d_out, hook_name_out, hook_layer_out and
hook_head_index_out; W_enc [d_in, d_sae], W_dec [d_sae, d_out], b_enc [d_sae], b_dec [d_out].
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import torch
from torch import nn

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder, squared_error

_LAYER = re.compile(r"^blocks\.(\d+)\.")
RIDGE = 0.1  # the data-aware decoder's ridge, relative to the mean squared feature activation (init_from_batch)


def _int_field(raw: dict, name: str) -> int:
    value = raw.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"cfg.json of a transcoder needs a positive integer {name} (got {value!r}).")
    return value


class Transcoder(SparseAutoencoder):
    """ReLU transcoder with an L1 penalty: input activation -> sparse features -> another activation."""

    architecture = "transcoder"
    aliases: ClassVar[tuple[str, ...]] = ("transcoder",)
    short_name = "transcoder"
    label = "Transcoder (ReLU, L1)"
    knob = Knob("l1", "L1 coefficient", 5.0)
    per_feature = {"b_enc": PerFeature()}
    resample_dead = False
    density_bias = "b_enc"
    folder_architecture = "transcoder"
    paired = True

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        cfg.extra.setdefault("d_out", cfg.d_in)  # an MLP's output is as wide as its input unless a folder says
        cfg.apply_b_dec_to_input = False  # b_dec is an output bias (SAELens refuses True for a transcoder)
        super().__init__(cfg, dtype, seed)
        d_out = self.d_out
        generator = torch.Generator().manual_seed(seed + 1) if seed is not None else None
        W_dec = torch.randn(cfg.d_sae, d_out, generator=generator, dtype=torch.float64)
        self.W_dec = nn.Parameter((W_dec / W_dec.norm(dim=1, keepdim=True)).to(dtype))
        self.b_dec = nn.Parameter(torch.zeros(d_out, dtype=dtype))
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae, dtype=dtype))

    # --- facts ---------------------------------------------------------------------------------------------
    @property
    def d_out(self) -> int:
        return int(self.cfg.extra["d_out"])

    @property
    def hook_name_out(self) -> str:
        return str(self.cfg.extra.get("hook_name_out") or "")

    @classmethod
    def check_config(cls, cfg: SAEConfig) -> None:
        d_out = cfg.extra.get("d_out")
        if not isinstance(d_out, int) or isinstance(d_out, bool) or d_out < 1:
            raise ValueError(f"A transcoder needs d_out, the width of its target activation (got {d_out!r}).")
        if cfg.normalize_activations != "none":
            raise ValueError("A transcoder reads raw activations (normalize_activations 'none').")

    @classmethod
    def tensor_shapes(cls, cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
        d_out = int(cfg.extra["d_out"])
        return {"W_enc": (cfg.d_in, cfg.d_sae), "W_dec": (cfg.d_sae, d_out), "b_dec": (d_out,),
                "b_enc": (cfg.d_sae,)}

    @classmethod
    def read_fields(cls, raw: dict) -> dict[str, Any]:
        meta = raw.get("metadata") or {}
        hook_out = raw.get("hook_name_out", meta.get("hook_name_out")) or ""
        head = raw.get("hook_head_index_out", meta.get("hook_head_index_out"))
        if head is not None:
            raise ValueError(f"cfg.json field hook_head_index_out is {head!r}: the transcoder writes one attention "
                             "head, which Interpscope does not hook.")
        layer = raw.get("hook_layer_out", meta.get("hook_layer_out"))
        if layer is None:
            match = _LAYER.match(str(hook_out))
            layer = int(match.group(1)) if match else -1
        return {"extra": {"d_out": _int_field(raw, "d_out"), "hook_name_out": str(hook_out),
                          "hook_layer_out": int(layer)}}

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict[str, Any]:
        return {"apply_b_dec_to_input": False, "activation_fn_str": "relu", "activation_fn_kwargs": {},
                "d_out": int(cfg.extra["d_out"]),
                "hook_name_out": cfg.extra.get("hook_name_out", ""),
                "hook_layer_out": int(cfg.extra.get("hook_layer_out", -1)), "hook_head_index_out": None}

    # --- inference -----------------------------------------------------------------------------------------
    def centred(self, x: torch.Tensor) -> torch.Tensor:
        """Nothing is subtracted from a transcoder's input (its b_dec is an output bias)."""
        return x

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        return torch.relu(sae_in @ self.W_enc + self.b_enc)

    # --- training on paired rows [x_in | y] ---------------------------------------------------------------
    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A paired training row's input and target parts."""
        return rows[..., :self.cfg.d_in], rows[..., self.cfg.d_in:]

    def reconstruction_target(self, x: torch.Tensor) -> torch.Tensor:
        return self.split(x)[1]

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        x_in, y = self.split(x)
        f = torch.relu(self._linear(x_in) + self.b_enc)
        y_hat = self._decode_rows(f) + self.b_dec
        recon = squared_error(y, y_hat)
        sparsity = coefficient * f.abs().sum(-1).mean()
        return LossTerms(recon + sparsity, {"recon": recon, "sparsity": sparsity}, f, y_hat)

    @torch.no_grad()
    def init_from_batch(self, x: torch.Tensor, density: float = 0.03) -> None:
        """b_dec = the target's mean; b_enc so each feature fires on about `density` of the batch; the decoder the
        ridge regression of the centred target on those first features (rows made unit norm, norms below 1 moved into
        W_enc and b_enc), so the first prediction starts from what these features can explain on this batch.

        Without the last two, a short run was worse than predicting the mean (issue 42: FVU 1.79 after 8,192
        tokens): the decoder rows are random and unrelated to the encoder, and a transcoder's input is much larger
        than its target (resid_mid vs mlp_out: ~25x the squared norm), so the ~8 features firing per row added
        random vectors larger than the target's own spread, and a few steps at the warm-up learning rate do not
        undo that. (An SAE's decoder starts as its encoder's transpose, so its first reconstruction points the
        right way.)"""
        x_in, y = self.split(x)
        self.b_dec.copy_(y.mean(0))
        pre = x_in @ self.W_enc
        k = max(1, min(x_in.shape[0], int(round((1 - density) * x_in.shape[0]))))
        self.b_enc.copy_(-pre.kthvalue(k, dim=0).values)
        f = torch.relu(pre + self.b_enc).double()
        centred = (y - self.b_dec).double()
        gram = f.T @ f
        ridge = RIDGE * float(gram.diagonal().mean()) + 1e-12
        rows = torch.linalg.solve(gram + ridge * torch.eye(gram.shape[0], dtype=gram.dtype), f.T @ centred)
        norms = rows.norm(dim=1)
        fired = norms > 1e-12
        # decoder rows unit norm (as training keeps them); norms below 1 move into the encoder (ReLU(a z) = a ReLU(z)),
        # shrinking the features that would overshoot; none is enlarged (that slowed long runs: a toy linear MLP
        # ended at FVU 0.102 after 600 steps instead of 0.064; with shrinking only, 0.080)
        self.W_dec[fired] = (rows[fired] / norms[fired, None]).to(self.W_dec.dtype)
        scale = torch.where(fired, norms.clamp(max=1.0), torch.ones_like(norms)).to(self.W_enc.dtype)
        self.W_enc.mul_(scale[None, :])
        self.b_enc.mul_(scale)
