"""Run-time normalisation of the activations an SAE reads, as the common SAE library (SAELens) applies it.

`normalize_activations` in cfg.json:
- "none": activations enter and leave unchanged;
- "layer_norm": in, x_n = (x - mu) / (std + 1e-5) with mu, std the mean and (unbiased) standard deviation over the
  model dimension of each row; out, x_hat = y * std + mu with that row's mu and std;
- "constant_norm_rescale": in, x_n = x * c with c = sqrt(d_in) / ||x||; out, x_hat = y / c.
The way out needs the statistics of the row that went in. `leave(y, x)` recomputes them from x; without x it
uses the statistics the last `enter` recorded in this thread for this SAE (encode then decode, as the library
does), and refuses when their shape does not match. Kinds whose scale is not stored in the folder are refused
when the folder is read (interpscope.sae.cfg_json).
"""
from __future__ import annotations

import threading

import torch

LN_EPS = 1e-5
RUNTIME_KINDS = ("none", "layer_norm", "constant_norm_rescale")

_last = threading.local()


def _stats(kind: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """layer_norm: (mu, std); constant_norm_rescale: (0, c). Computed as the library computes them."""
    if kind == "layer_norm":
        mu = x.mean(dim=-1, keepdim=True)
        return mu, (x - mu).std(dim=-1, keepdim=True)
    if kind == "constant_norm_rescale":
        return torch.zeros_like(x[..., :1]), x.shape[-1] ** 0.5 / x.norm(dim=-1, keepdim=True)
    raise ValueError(f"normalize_activations {kind!r} is not applied at run time")


def enter(kind: str, x: torch.Tensor, owner: object) -> torch.Tensor:
    """The activation as the SAE reads it; records its statistics for `leave` (this thread, this owner)."""
    if kind == "none":
        return x
    shift, scale = _stats(kind, x)
    records = getattr(_last, "records", None)
    if records is None:
        records = _last.records = {}
    records[id(owner)] = (shift.detach(), scale.detach())
    if kind == "layer_norm":
        return (x - shift) / (scale + LN_EPS)
    return x * scale


def leave(kind: str, y: torch.Tensor, owner: object, x: torch.Tensor | None = None) -> torch.Tensor:
    """Map the SAE's output back to the model's scale, with the statistics of x (or of the last `enter`)."""
    if kind == "none":
        return y
    if x is not None:
        shift, scale = _stats(kind, x)
    else:
        shift, scale = getattr(_last, "records", {}).get(id(owner), (None, None))
        if shift is None or shift.shape[:-1] != y.shape[:-1]:
            raise ValueError(f"This SAE normalises its input ({kind}); decoding needs the statistics of the input "
                             "it reconstructs: call forward(x), or decode(features, x).")
    if kind == "layer_norm":
        return y * scale.to(y.dtype) + shift.to(y.dtype)
    return y / scale.to(y.dtype)
