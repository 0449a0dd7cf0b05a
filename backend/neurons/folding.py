"""The final norm and the unembedding, written out so effects through them can be split.

Stolfo et al. analyse W_out and W_U with the final norm's weight folded into W_U (and, for LayerNorm models,
the residual writes centred, since LayerNorm removes the mean). Here the same folding is computed from an
adapter, and the final norm is spelled out as  normed = gamma * centre(x) / scale(x) + beta  so a caller can
freeze `scale` at its clean value (the direct effect) or let it move (the total effect).
"""
from __future__ import annotations

import torch

from backend.adapters import FoldedNorm, ModelAdapter


FinalNorm = FoldedNorm


def final_norm(adapter: ModelAdapter) -> FoldedNorm:
    """The adapter's final norm as plain tensors (its gamma folded the family's way: Gemma's 1 + w, ones when the
    norm has no weight)."""
    return adapter.folded_norm()


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
    folded = adapter.folded_unembedding(dtype)
    if adapter.norm.centred:
        folded = folded - folded.mean(0, keepdim=True)
    return folded - folded.mean(1, keepdim=True)


def folded_W_out(adapter: ModelAdapter, layer: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """W_out [d_mlp, d_model] of a layer, each row centred for LayerNorm models (what the norm lets through)."""
    W_out = adapter.W_out(layer).detach()
    dtype = dtype or (W_out.dtype if W_out.dtype in (torch.float32, torch.float64) else torch.float32)
    W_out = W_out.to(dtype)
    if adapter.norm.centred:
        W_out = W_out - W_out.mean(1, keepdim=True)
    return W_out
