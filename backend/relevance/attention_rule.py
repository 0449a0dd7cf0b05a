"""The attention part of AttnLRP and CP-LRP as one autograd node per layer.

The rule on attention is the plain gradient with fixed factors on queries, keys and values (AttnLRP: the uniform
rule on the two bilinear products gives q and k x 1/4, v x 1/2, the softmax kept; CP-LRP: q and k detached, v x 1).
`qkv_scale` applies those factors with a tensor hook on each projection's output: three extra autograd nodes a
layer besides the attention's own (the score product, its scaling, the mask, the softmax and its cast, the value
product, the transposes). Measured on SmolLM2-135M at 128 tokens those hooks were the largest single part of
AttnLRP's cost over a plain gradient pass (bench/relevance_rule_costs.py).

Here the whole eager attention is one autograd Function whose forward is the family's own eager attention (the same
operations in the same order, so the same numbers bit for bit: tested per family) and whose backward writes the
rule's gradients for q, k and v directly: g_v = c_v A^T g, g_S = s A * (g_A - rowsum(g_A * A)) with
g_A = g V^T (autograd's softmax backward kernel, in the softmax's float32), g_q = c_q g_S K, g_k = c_k g_S^T Q
(s the score scaling, grouped-query heads summed back to their key/value head): with factors 1, autograd's
gradients through the eager attention to the last bit (tested). With q and k detached (CP-LRP) nothing goes
through the softmax at all. The factors act after the rotary embedding and any q/k norm; both are linear under
the rules (the norm rule detaches the normaliser), so the gradient at the projections' outputs is the one
`qkv_scale` gives.

It applies where an attention module's forward calls a modeling file's `eager_attention_forward` whose source is
Llama's (Llama, Mistral, Qwen2/3, their MoE variants, Mixtral, OLMo/OLMoE, Phi-3, Gemma 1 in transformers 5.x),
in eval mode; every other family (GPT-2, NeoX, Gemma 2/3 with soft-capping, T5, ViT) keeps `qkv_scale`'s hooks.
The swap acts on the caller's passes only (interpscope.capture.override_attention).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from interpscope.adapters import ModelAdapter
from interpscope.capture import eager_attention_of, override_attention

_LLAMA_FORM: dict[int, bool] = {}


def _llama_source() -> str:
    from transformers.models.llama import modeling_llama

    return inspect.getsource(modeling_llama.eager_attention_forward)


def llama_form(fn: Callable | None) -> bool:
    """Whether an eager attention function is Llama's (the same source), which the fused rule reproduces."""
    if fn is None:
        return False
    key = id(fn)
    if key not in _LLAMA_FORM:
        try:
            _LLAMA_FORM[key] = inspect.getsource(fn) == _llama_source() and "repeat_kv" in fn.__globals__
        except (OSError, TypeError):
            _LLAMA_FORM[key] = False
    return _LLAMA_FORM[key]


class _RuleAttention(torch.autograd.Function):
    """Llama's eager attention forward; the backward with the rule's factors on q, k and v (module docstring)."""

    @staticmethod
    def forward(ctx, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                scaling: float, groups: int, factors: tuple[float, float, float], repeat_kv: Callable):
        key_states = repeat_kv(key, groups)
        value_states = repeat_kv(value, groups)
        scores = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if mask is not None:
            scores = scores + mask
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        weights = probs.to(query.dtype)
        output = torch.matmul(weights, value_states).transpose(1, 2).contiguous()
        ctx.save_for_backward(query, key_states, value_states, weights, probs)
        ctx.scaling, ctx.groups, ctx.factors = scaling, groups, factors
        ctx.mark_non_differentiable(weights)
        return output, weights

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_weights: Any):
        query, key_states, value_states, weights, probs = ctx.saved_tensors
        c_q, c_k, c_v = ctx.factors
        grad = grad.transpose(1, 2)  # [B, H, T, dh]
        batch, heads, length, d_head = grad.shape
        groups = ctx.groups

        def per_kv_head(x: torch.Tensor) -> torch.Tensor:  # repeat_kv's backward: sum each group's heads
            return x.view(batch, heads // groups, groups, x.shape[-2], d_head).sum(2) if groups > 1 else x

        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[2]:
            grad_v = per_kv_head(torch.matmul(weights.transpose(2, 3), grad))
            grad_v = grad_v * c_v if c_v != 1 else grad_v
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # autograd's own steps in its order: the cast back to the softmax's float32, its backward kernel, the
            # cast to the scores' dtype, the scaling; then the two products (the factors last)
            grad_weights = torch.matmul(grad, value_states.transpose(2, 3)).to(probs.dtype)
            grad_scores = torch.ops.aten._softmax_backward_data(grad_weights, probs, -1, probs.dtype)
            grad_scores = grad_scores.to(query.dtype) * ctx.scaling
            if ctx.needs_input_grad[0]:
                grad_q = torch.matmul(grad_scores, key_states)
                grad_q = grad_q * c_q if c_q != 1 else grad_q
            if ctx.needs_input_grad[1]:
                grad_k = per_kv_head(torch.matmul(grad_scores.transpose(2, 3), query))
                grad_k = grad_k * c_k if c_k != 1 else grad_k
        return grad_q, grad_k, grad_v, None, None, None, None, None


def rule_attention(factors: tuple[float, float, float]) -> Callable:
    """An eager attention function (Llama's signature) computing with the rule's factors on q, k and v."""
    c_q, c_k, _ = factors

    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs: Any):
        eager = eager_attention_of(module)
        if module.training and dropout:  # the rule is for eval passes; a training pass keeps its own attention
            assert eager is not None
            return eager(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
        assert eager is not None
        query = query if c_q else query.detach()
        key = key if c_k else key.detach()
        groups: Any = module.num_key_value_groups
        return _RuleAttention.apply(query, key, value, attention_mask, scaling, int(groups), factors,
                                    eager.__globals__["repeat_kv"])
    return attention


def fusable_attention(adapter: ModelAdapter) -> list[nn.Module] | None:
    """The model's attention modules when every one runs Llama's eager attention (the fused rule applies), else
    None (the hooks of qkv_scale apply)."""
    modules = [adapter.attention(layer) for layer in range(adapter.n_layers)]
    found = [m for m in modules if m is not None]
    if not found:
        return None
    for module in found:
        config = getattr(module, "config", None)
        if getattr(config, "_attn_implementation", None) != "eager":
            return None
        if not hasattr(module, "num_key_value_groups") or not llama_form(eager_attention_of(module)):
            return None
    return found


class AttentionRule:
    """Gradient factors on queries, keys and values: the fused attention node where the family allows it (module
    docstring), else `fallback` (qkv_scale's hooks on the projections' outputs)."""

    def __init__(self, q: float, k: float, v: float, fallback: Any):
        self.factors = (float(q), float(k), float(v))
        self.fallback = fallback
        self.name = f"attention-rule(q={q},k={k},v={v})"
        self._fn = rule_attention(self.factors)

    def apply(self, adapter: ModelAdapter):
        from interpscope.relevance.rules import adapter_memo

        modules = adapter_memo(adapter, "fusable-attention", lambda: fusable_attention(adapter))
        if modules is None or any(m.training for m in modules):
            return self.fallback.apply(adapter)
        return override_attention(modules, self._fn)
