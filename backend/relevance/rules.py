"""Relevance rules: context managers that change how ONE model instance computes its backward pass.

Every rule is "Gradient x Input with a modified backward" (METHODS.md section 1): it registers forward hooks on
modules of the given model instance (found through the adapter, never by attribute paths) that rewrite a module's
output into a tensor of the same value with a different gradient. Leaving the `with` block removes every hook,
also after an exception, so the instance computes exactly what it did before. Classes are never patched.

A rule is any object with `apply(adapter) -> context manager`; other families (e.g. MambaLRP) add their own.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from interpscope.adapters import ModelAdapter
from interpscope.adapters.base import weight_of
from interpscope.capture import model_lock, scoped
from interpscope.relevance.gates import gate_rules

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


class Rule(Protocol):
    """A change to the backward pass of one model instance, active inside `with rule.apply(adapter):`."""

    name: str

    def apply(self, adapter: ModelAdapter):  # -> AbstractContextManager[None]
        ...


class _ScaleGrad(torch.autograd.Function):
    """Identity in the forward pass (a view, no copy); the gradient times `scale` (a number or a tensor that
    broadcasts over the last dimension) in the backward pass."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, scale):
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class _LinearRule(torch.autograd.Function):
    """Returns `value` (computed without a graph) with the gradient of the affine map y = L(x) + bias that gave it,
    L(x) = centre(x) * inv * gain: grad_x = centre((grad * gain) * inv), in the order autograd would multiply;
    grad_bias = grad summed over positions, so biases keep their share of the relevance. Without `centre` and with
    gain None this is grad_x = grad * inv (the activation rule)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, value: torch.Tensor, inv: torch.Tensor, gain: torch.Tensor | None,
                centre: bool, bias: torch.Tensor | None = None):
        ctx.save_for_backward(inv, gain)
        ctx.centre, ctx.dtype = centre, x.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        inv, gain = ctx.saved_tensors
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad.to(inv.dtype)
            if gain is not None:
                grad_x = grad_x * gain
            grad_x = grad_x * inv
            if ctx.centre:
                grad_x = grad_x - grad_x.sum(-1, keepdim=True) / grad_x.shape[-1]
            grad_x = grad_x.to(ctx.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[5]:
            grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0).to(ctx.bias_dtype)
        return grad_x, None, None, None, None, grad_bias


def scale_grad(tensor: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """Same value as `tensor` (bit for bit), gradient multiplied by `scale` (0 detaches)."""
    if isinstance(scale, (int, float)) and scale == 1:
        return tensor
    if isinstance(scale, (int, float)) and scale == 0:
        return tensor.detach()
    if not tensor.requires_grad:
        return tensor
    return _ScaleGrad.apply(tensor, scale)


def safe_divisor(x: torch.Tensor) -> torch.Tensor:
    """x with exact zeros replaced by 1, for f(x) / x of activations with f(0) = 0 (SiLU, GELU, ReLU).

    Their f(x) / x stays bounded near zero, so no epsilon is added elsewhere: the rule's value and its
    conservation stay exact instead of being off by eps / |x|.
    """
    return torch.where(x == 0, torch.ones_like(x), x)


@contextmanager
def output_hooks(pairs: Sequence[tuple[nn.Module, Callable]]) -> Iterator[None]:
    """Register forward hooks `fn(module, args, output) -> new output` on the given modules; remove on exit.

    They go through interpscope.capture, so they act only on this run's forward passes: another session may run plain
    inference on the shared model (without the lock) while rules are on.
    """
    with scoped(pairs, role="rule"):
        yield


def _replace_first(output, new: torch.Tensor):
    return (new, *output[1:]) if isinstance(output, tuple) else new


def _first(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


class NormRule:
    """Identity on the normaliser: y = centre(x) * stopgrad(1 / scale(x)) * gamma + beta, for every norm the adapter
    lists (per-block, sandwich, query/key and final norms), computed as the adapter says its family computes it
    (LayerNorm or RMSNorm, Gemma's 1 + w gain, weightless norms). The map x -> y is then exactly linear in the
    backward pass and conserves relevance; the forward values are the module's own (same operations, same order),
    computed without a graph, and the backward is one product per norm (grad_x = centre(grad * gamma / scale(x))).
    """

    name = "norm-identity"

    @staticmethod
    def _hook(adapter: ModelAdapter) -> Callable:
        def hook(module, args, output):
            x = args[0]
            out = _first(output)
            if not out.requires_grad:
                return None
            spec = adapter.norm_spec(module)
            work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
            with torch.no_grad():
                value = adapter.norm_forward(module, x, detach_scale=True).to(out.dtype)
                source = x.to(work)
                centred = source - source.mean(-1, keepdim=True) if spec.centred else source
                inv = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + adapter.norm_eps(module))
                gain = adapter.norm_gamma(module)
                gain = None if gain is None else gain.detach().to(work)
            bias = getattr(module, "bias", None)
            return _replace_first(output, _LinearRule.apply(x, value, inv, gain, spec.centred, bias))
        return hook

    def apply(self, adapter: ModelAdapter):
        hook = self._hook(adapter)
        return output_hooks([(norm, hook) for norm in adapter.norms()])


class ActivationRule:
    """Identity rule on the MLP nonlinearity: y = x * stopgrad(f(x) / x); `grad_scale` 0.5 adds the uniform
    rule of a gated product (the activated gate's half), 0 detaches the gate (CP-LRP)."""

    name = "activation-identity"

    def __init__(self, grad_scale: float = 1.0):
        self.grad_scale = grad_scale

    def _hook(self, module, args, output):
        x = args[0]
        activated = _first(output)
        if self.grad_scale == 0:
            return _replace_first(output, activated.detach())
        if not activated.requires_grad:
            return None
        with torch.no_grad():
            factor = activated / safe_divisor(x)
            if self.grad_scale != 1:
                factor = factor * self.grad_scale
        # the native value, bit for bit, with the identity rule's gradient (times grad_scale)
        return _replace_first(output, _LinearRule.apply(x, activated, factor, None, False))

    def apply(self, adapter: ModelAdapter):
        modules = [m for layer in range(adapter.n_layers) for m in adapter.mlp_activations(layer)]
        return output_hooks([(m, self._hook) for m in modules])


class OutputGradScale:
    """Scale the gradient of some modules' outputs, part by part (e.g. q, k, v of a fused projection)."""

    def __init__(self, name: str, select: Callable[[ModelAdapter], list[tuple[nn.Module, torch.Tensor]]]):
        self.name = name
        self.select = select

    @staticmethod
    def _hook(scale: torch.Tensor) -> Callable:
        cache: dict[tuple, torch.Tensor] = {}
        all_zero, all_one = bool((scale == 0).all()), bool((scale == 1).all())
        uniform = float(scale.flatten()[0]) if bool((scale == scale.flatten()[0]).all()) else None

        def hook(module, args, output):
            out = _first(output)
            if all_one:
                return None
            if all_zero:
                return _replace_first(output, out.detach())
            if uniform is not None:
                return _replace_first(output, scale_grad(out, uniform))
            key = (out.dtype, out.device)
            if key not in cache:
                cache[key] = scale.to(dtype=out.dtype, device=out.device)
            return _replace_first(output, scale_grad(out, cache[key]))
        return hook

    def apply(self, adapter: ModelAdapter):
        return output_hooks([(module, self._hook(scale)) for module, scale in self.select(adapter)])


def qkv_scale(q: float, k: float, v: float) -> OutputGradScale:
    """Gradient factors for queries, keys and values (works for separate and fused projections)."""
    factors = {"q": q, "k": k, "v": v}

    def select(adapter: ModelAdapter) -> list[tuple[nn.Module, torch.Tensor]]:
        chosen = []
        for layer in range(adapter.n_layers):
            for module, parts in adapter.attention_qkv(layer):
                width = max(int(index.max()) for index in parts.values()) + 1
                scale = torch.ones(width, dtype=torch.float64)
                for part, index in parts.items():
                    scale[index] = factors[part]
                chosen.append((module, scale))
        return chosen

    return OutputGradScale(f"qkv-scale(q={q},k={k},v={v})", select)


def mlp_up_scale(factor: float) -> OutputGradScale:
    """Gradient factor on the linear branch of a gated MLP (uniform rule: 0.5); on a fused gate/up projection only
    the up half's output indices (adapter.mlp_up_parts) are scaled."""

    def select(adapter: ModelAdapter) -> list[tuple[nn.Module, torch.Tensor]]:
        chosen = []
        for layer in range(adapter.n_layers):
            for up, index in adapter.mlp_up_parts(layer):
                if index is None:
                    chosen.append((up, torch.tensor([factor], dtype=torch.float64)))
                else:
                    scale = torch.ones(int(weight_of(up).shape[0]), dtype=torch.float64)
                    scale[index] = factor
                    chosen.append((up, scale))
        return chosen

    return OutputGradScale(f"mlp-up-scale({factor})", select)


def attnlrp_rules(adapter: ModelAdapter) -> list[Rule]:
    """AttnLRP: norm identity, activation identity, uniform rule on gated products, q/k x 1/4 and v x 1/2."""
    rules: list[Rule] = [NormRule(), qkv_scale(0.25, 0.25, 0.5)]
    if adapter.gated_mlp:
        rules += [ActivationRule(0.5), mlp_up_scale(0.5)]
    else:
        rules.append(ActivationRule(1.0))
    return rules + gate_rules(adapter, attnlrp=True)


def cplrp_rules(adapter: ModelAdapter) -> list[Rule]:
    """CP-LRP: as AttnLRP but q and k detached (no relevance through the softmax) and the gate detached."""
    rules: list[Rule] = [NormRule(), qkv_scale(0.0, 0.0, 1.0)]
    rules.append(ActivationRule(0.0) if adapter.gated_mlp else ActivationRule(1.0))
    return rules + gate_rules(adapter, attnlrp=False)


@contextmanager
def applied(adapter: ModelAdapter, rules: Sequence[Rule]) -> Iterator[None]:
    """Enter every rule on the adapter's model instance; all are undone on exit, also after an exception.

    The caller holds the model's lock (interpscope.capture.model_lock); `apply_rules` does both.
    """
    with ExitStack() as stack:
        for rule in rules:
            stack.enter_context(rule.apply(adapter))
        yield


@contextmanager
def apply_rules(model_or_lm: nn.Module | LoadedModel, rules: Sequence[Rule] | Callable[[ModelAdapter], Sequence[Rule]]
                ) -> Iterator[ModelAdapter]:
    """Hold the model's lock and apply `rules` (a list, or a function of the adapter) for the `with` block."""
    from interpscope.adapters import get_adapter

    adapter = get_adapter(model_or_lm) if isinstance(model_or_lm, nn.Module) else model_or_lm.adapter
    chosen = rules(adapter) if callable(rules) else rules
    with model_lock(model_or_lm), applied(adapter, chosen):
        yield adapter
