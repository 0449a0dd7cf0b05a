"""The final norm and the unembedding, written out so effects through them can be split.

Stolfo et al. analyse W_out and W_U with the final norm's weight folded into W_U (and, for LayerNorm models,
the residual writes centred, since LayerNorm removes the mean). Here the same folding is computed from an
adapter, and the final norm is spelled out as  normed = gamma * centre(x) / scale(x) + beta  so a caller can
freeze `scale` at its clean value (the direct effect) or let it move (the total effect).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.adapters import ModelAdapter


@dataclass
class FinalNorm:
    """What the final norm does, as plain tensors: kind, gain gamma [d], bias beta [d] or None, eps."""

    kind: str
    gamma: torch.Tensor
    beta: torch.Tensor | None
    eps: float

    @property
    def centres(self) -> bool:
        return self.kind == "layernorm"

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """Remove the mean over d_model (LayerNorm) or leave x as it is (RMSNorm)."""
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The per-position divisor [...]: sqrt(var + eps) for LayerNorm, sqrt(mean square + eps) for RMSNorm."""
        centred = self.centre(x)
        return torch.sqrt(centred.pow(2).mean(-1) + self.eps)

    def apply(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """The norm's output; with `scale` given, that scale is used instead of x's own (frozen norm)."""
        scale = self.scale(x) if scale is None else scale
        out = self.gamma * self.centre(x) / scale.unsqueeze(-1)
        return out + self.beta if self.beta is not None else out


def final_norm(adapter: ModelAdapter) -> FinalNorm:
    """The adapter's final norm as a FinalNorm (Gemma's RMSNorm multiplies by 1 + weight)."""
    weight = adapter.final_norm_weight()
    d_model = adapter.d_model
    gamma = weight.detach() if weight is not None else torch.ones(d_model, device=adapter.W_U().device)
    if str(getattr(adapter.config, "model_type", "")).startswith("gemma"):
        gamma = 1.0 + gamma
    bias = getattr(adapter.final_norm(), "bias", None)
    beta = bias.detach() if bias is not None else None
    return FinalNorm(kind=adapter.norm_kind, gamma=gamma, beta=beta, eps=adapter.final_norm_eps())


def unembed_bias(adapter: ModelAdapter) -> torch.Tensor | None:
    """The unembedding's bias [vocab], or None."""
    bias = adapter.b_U()
    return bias.detach() if bias is not None else None


def logits_from_residual(adapter: ModelAdapter, residual: torch.Tensor,
                         scale: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [..., vocab] from the final residual [..., d_model], optionally with a frozen norm scale."""
    norm = final_norm(adapter)
    normed = norm.apply(residual, scale)
    W_U = adapter.W_U().detach()
    logits = normed.to(W_U.dtype) @ W_U
    bias = unembed_bias(adapter)
    return logits + bias if bias is not None else logits


def folded_unembedding(adapter: ModelAdapter, dtype: torch.dtype | None = None) -> torch.Tensor:
    """W_U [d_model, vocab] with gamma folded in, centred over d_model for LayerNorm models and over vocab.

    Centring over vocab removes the part of each logit shared by all tokens, which softmax ignores; a direction
    that only shifts every logit equally therefore counts as null space, as it should.
    """
    W_U = adapter.W_U().detach()
    dtype = dtype or (W_U.dtype if W_U.dtype in (torch.float32, torch.float64) else torch.float32)
    folded = W_U.to(dtype) * final_norm(adapter).gamma.to(dtype)[:, None]
    if adapter.norm_kind == "layernorm":
        folded = folded - folded.mean(0, keepdim=True)
    return folded - folded.mean(1, keepdim=True)


def folded_W_out(adapter: ModelAdapter, layer: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """W_out [d_mlp, d_model] of a layer, each row centred for LayerNorm models (what the norm lets through)."""
    W_out = adapter.W_out(layer).detach()
    dtype = dtype or (W_out.dtype if W_out.dtype in (torch.float32, torch.float64) else torch.float32)
    W_out = W_out.to(dtype)
    if adapter.norm_kind == "layernorm":
        W_out = W_out - W_out.mean(1, keepdim=True)
    return W_out
