"""The final norm and the unembedding, written out so effects through them can be split.

Stolfo et al. analyse W_out and W_U with the final norm's weight folded into W_U (and, for LayerNorm models,
the residual writes centred, since LayerNorm removes the mean). Here the same folding is computed from an
adapter, and the final norm is spelled out as  normed = gamma * centre(x) / scale(x) + beta  so a caller can
freeze `scale` at its clean value (the direct effect) or let it move (the total effect).
"""
from __future__ import annotations

import torch

from interpscope.adapters import FoldedNorm, ModelAdapter
from interpscope.config import InterpscopeError

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


def output_norm(adapter: ModelAdapter, layer: int) -> FoldedNorm | None:
    """The norm the adapter declares on the MLP's output before it joins the residual (Gemma 3's
    post_feedforward_layernorm), as plain tensors; None when the MLP writes into the residual directly."""
    module = adapter.mlp_output_norm(layer)
    return None if module is None else adapter.folded_norm(module)


def mlp_pre_output(adapter: ModelAdapter, layer: int, activations: torch.Tensor) -> torch.Tensor:
    """What the MLP's down projection makes of neuron activations [..., d_mlp]: the input of its output norm
    (or the residual write itself when there is none) [..., d_model], in the activations' dtype."""
    W_out = adapter.W_out(layer).detach().to(device=activations.device, dtype=activations.dtype)
    bias = adapter.b_out(layer)
    out = activations @ W_out
    return out + bias.detach().to(out.dtype) if bias is not None else out


def folded_W_out(adapter: ModelAdapter, layer: int, dtype: torch.dtype | None = None,
                 post_scale: float | None = None) -> torch.Tensor:
    """What each neuron of a layer writes into the residual per unit of activation [d_mlp, d_model].

    Without an output norm that is W_out itself. Through an output norm (gain gamma, scale r) the write of
    neuron n is gamma * centre(w_n) / r: exact to first order at the position's own scale r. For weight
    statistics r is one measured typical scale (`post_scale`, the mean RMS of the MLP's pre-norm output over
    corpus tokens, interpscope.entropy_neurons.postnorm), so norms compare across the neurons of a layer and across
    families;
    rho, LogitVar and the unigram cosine are ratios and do not depend on it. Each row is then centred for
    LayerNorm models (what the final norm lets through)."""
    W_out = adapter.W_out(layer).detach()
    dtype = dtype or (W_out.dtype if W_out.dtype in (torch.float32, torch.float64) else torch.float32)
    W_out = W_out.to(dtype)
    post = output_norm(adapter, layer)
    if post is not None:
        if post_scale is None or not post_scale > 0:
            raise InterpscopeError(f"Layer {layer}'s MLP output passes through a norm: its neurons' writes need "
                                   "the norm's typical scale (post_scale), measured on corpus tokens.")
        W_out = post.gamma.to(device=W_out.device, dtype=dtype) * post.centre(W_out) / post_scale
    if adapter.norm.centred:
        W_out = W_out - W_out.mean(1, keepdim=True)
    return W_out


def output_norm_change(post: FoldedNorm, mlp_pre: torch.Tensor, shift: torch.Tensor,
                       w_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact residual change postnorm(m + shift * w) - postnorm(m) as two coefficients [...]: the change is
    a * (postnorm(m) - beta) + b * gamma * centre(w), with a = r / r' - 1 and b = shift / r' (r, r' the norm's
    scale before and after), since the norm is linear once its scale is fixed. mlp_pre: m [..., d]; shift [...]."""
    r = post.scale(mlp_pre)
    r_new = post.scale(mlp_pre + shift.unsqueeze(-1) * w_out)
    return r / r_new - 1.0, shift / r_new
