"""Relevance rules: context managers that change how ONE model instance computes its backward pass.

Every rule is "Gradient x Input with a modified backward" (docs/methods/attnlrp.md): it registers forward hooks on
modules of the given model instance (found through the adapter, never by attribute paths) that rewrite a module's
output into a tensor of the same value with a different gradient, or (the norm rule) swaps a module's forward for
the run's own passes (interpscope.capture.override_forward). Leaving the `with` block removes every hook and swap,
also after an exception, so the instance computes exactly what it did before. Classes are never patched.

A rule is any object with `apply(adapter) -> context manager`; other families (e.g. MambaLRP) add their own.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from torch import nn

from interpscope.adapters import ModelAdapter
from interpscope.adapters.base import weight_of
from interpscope.capture import model_lock, override_forward, scaled_grad_view, scoped
from interpscope.relevance.gates import gate_rules

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

T = TypeVar("T")


_MEMO: weakref.WeakKeyDictionary[ModelAdapter, dict[object, Any]] = weakref.WeakKeyDictionary()


def adapter_memo(adapter: ModelAdapter, key: object, build: Callable[[], T]) -> T:
    """`build()` once per adapter instance and key, kept while the adapter lives: what a rule or the engine looks up
    in the model's structure (modules, index sets, their factors) on every pass. A loaded model's modules do not
    change (Interpscope edits what they compute through hooks, never the modules), and the adapter of a loaded model
    lives as long as the model."""
    memo = _MEMO.get(adapter)
    if memo is None:
        memo = _MEMO[adapter] = {}
    if key not in memo:
        memo[key] = build()
    return memo[key]


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
    grad_bias = grad summed over positions, so biases keep their share of the relevance. The activation rule uses it
    without `centre`, gain or bias: grad_x = grad * inv, the native value kept bit for bit."""

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


def _scaled_view(tensor: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """scale_grad for a module's output: a view of it (the same numbers) whose gradient a tensor hook multiplies by
    `scale` (a number or a tensor that broadcasts over the last dimension; 0 detaches). The hook is torch.mul bound
    to the scale, so the backward runs no Python frame and the forward makes no autograd Function: the cheapest of the
    ways measured; what reaches `tensor` (and a tap holding it) is the scaled gradient, as with scale_grad. The hook
    itself is registered by interpscope.capture (the one place hooks are made); it lives on this pass's tensor only."""
    if isinstance(scale, (int, float)) and scale == 0:
        return tensor.detach()
    if not tensor.requires_grad:
        return tensor
    return scaled_grad_view(tensor, scale)


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
    backward pass and conserves relevance.

    The rule is the norm's forward itself, swapped in for this run only (interpscope.capture.override_forward, no
    hook): `adapter.norm_forward(detach_scale=True)`, the module's own operations in the module's order, so a float32
    RMS norm gives its own output bit for bit (tested per family) and autograd's backward is one product per norm
    (grad_x = centre(grad * gamma / scale(x))), no Python in it. Measured on SmolLM2 at 64 tokens this replaced a
    forward hook that recomputed the normaliser and a Python autograd Function per norm.
    """

    name = "norm-identity"

    @staticmethod
    def forward_for(adapter: ModelAdapter, module: nn.Module) -> Callable[..., torch.Tensor]:
        """The rule's forward for `module`: what the module computes, with the normaliser detached."""
        def forward(hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            return adapter.norm_forward(module, hidden_states, detach_scale=True)
        return forward

    @contextmanager
    def _swapped(self, adapter: ModelAdapter) -> Iterator[None]:
        with ExitStack() as stack:
            for norm in adapter_memo(adapter, "norms", adapter.norms):
                stack.enter_context(override_forward(norm, self.forward_for(adapter, norm)))
            yield

    def apply(self, adapter: ModelAdapter):
        return self._swapped(adapter)


class ActivationRule:
    """Identity rule on the MLP nonlinearity: y = x * stopgrad(f(x) / x); `grad_scale` 0.5 adds the uniform
    rule of a gated product (the activated gate's half), 0 detaches the gate (CP-LRP).

    For the nonlinearities used (SiLU, GELU, ReLU: f(0) = 0) f(x) / x stays bounded near zero and is taken as 0 at
    an exact zero, so no epsilon is added anywhere: the rule's value and its conservation stay exact."""

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
        with torch.no_grad():  # f(x) / x, 0 where x == 0 (f(0) = 0), times grad_scale: one new tensor, in place
            factor = torch.div(activated, x)
            factor.nan_to_num_(nan=0.0)  # 0 / 0 at exact zeros (the only NaN a finite x gives): one pass, no mask
            if self.grad_scale != 1:
                factor.mul_(self.grad_scale)
        # the native value, bit for bit, with the identity rule's gradient (times grad_scale). Detached, so nothing
        # keeps the module's own autograd node alive: it saved its input for a backward that never runs, one more
        # [T, width] tensor held per MLP until the pass ends than a plain gradient pass holds
        return _replace_first(output, _LinearRule.apply(x, activated.detach(), factor, None, False))

    def apply(self, adapter: ModelAdapter):
        modules = adapter_memo(adapter, "mlp-activations",
                               lambda: [m for layer in range(adapter.n_layers) for m in adapter.mlp_activations(layer)])
        return output_hooks([(m, self._hook) for m in modules])


class OutputGradScale:
    """Scale the gradient of some modules' outputs, part by part (e.g. q, k, v of a fused projection).

    `select(adapter)` gives (module, scale) pairs: a number scales the whole output (1: no hook at all, 0: detached),
    a tensor [width] each output feature (only fused projections whose parts get different factors need one)."""

    def __init__(self, name: str, select: Callable[[ModelAdapter], list[tuple[nn.Module, float | torch.Tensor]]],
                 memo_key: object = None):
        self.name = name
        self.select = select
        self.memo_key = memo_key  # given: select's hooks are built once per adapter (select depends on nothing else)

    @staticmethod
    def _uniform(scale: float | torch.Tensor) -> float | None:
        if not isinstance(scale, torch.Tensor):
            return float(scale)
        first = scale.flatten()[0]
        return float(first) if bool((scale == first).all()) else None

    @staticmethod
    def _hook(scale: float | torch.Tensor) -> Callable:
        uniform = OutputGradScale._uniform(scale)
        if uniform is not None:
            def hook(module, args, output):
                return _replace_first(output, _scaled_view(_first(output), uniform))
            return hook
        assert isinstance(scale, torch.Tensor)
        per_feature = scale
        cache: dict[tuple, torch.Tensor] = {}

        def hook_parts(module, args, output):
            out = _first(output)
            key = (out.dtype, out.device)
            if key not in cache:
                cache[key] = per_feature.to(dtype=out.dtype, device=out.device)
            return _replace_first(output, _scaled_view(out, cache[key]))
        return hook_parts

    def _pairs(self, adapter: ModelAdapter) -> list[tuple[nn.Module, Callable]]:
        return [(module, self._hook(scale)) for module, scale in self.select(adapter) if self._uniform(scale) != 1]

    def apply(self, adapter: ModelAdapter):
        if self.memo_key is None:
            return output_hooks(self._pairs(adapter))
        return output_hooks(adapter_memo(adapter, ("output-grad-scale", self.memo_key), lambda: self._pairs(adapter)))


def qkv_scale(q: float, k: float, v: float) -> OutputGradScale:
    """Gradient factors for queries, keys and values (works for separate and fused projections)."""
    factors = {"q": q, "k": k, "v": v}

    def select(adapter: ModelAdapter) -> list[tuple[nn.Module, float | torch.Tensor]]:
        chosen: list[tuple[nn.Module, float | torch.Tensor]] = []
        for layer in range(adapter.n_layers):
            for module, parts in adapter.attention_qkv(layer):
                if len({factors[part] for part in parts}) == 1:  # one factor for the whole output: a number
                    chosen.append((module, float(factors[next(iter(parts))])))
                    continue
                width = max(int(index.max()) for index in parts.values()) + 1
                scale = torch.ones(width, dtype=torch.float64)
                for part, index in parts.items():
                    scale[index] = factors[part]
                chosen.append((module, scale))
        return chosen

    return OutputGradScale(f"qkv-scale(q={q},k={k},v={v})", select, memo_key=("qkv", q, k, v))


def mlp_up_scale(factor: float) -> OutputGradScale:
    """Gradient factor on the linear branch of a gated MLP (uniform rule: 0.5); on a fused gate/up projection only
    the up half's output indices (adapter.mlp_up_parts) are scaled."""

    def select(adapter: ModelAdapter) -> list[tuple[nn.Module, float | torch.Tensor]]:
        chosen: list[tuple[nn.Module, float | torch.Tensor]] = []
        for layer in range(adapter.n_layers):
            for up, index in adapter.mlp_up_parts(layer):
                if index is None:
                    chosen.append((up, float(factor)))
                else:
                    scale = torch.ones(int(weight_of(up).shape[0]), dtype=torch.float64)
                    scale[index] = factor
                    chosen.append((up, scale))
        return chosen

    return OutputGradScale(f"mlp-up-scale({factor})", select, memo_key=("mlp-up", factor))


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

    The caller holds the model's lock (interpscope.capture.model_lock); `apply_rules` does both. Rules are left in
    the order they were entered (each removes its hooks in the order it added them), so every removal finds its
    hook first in interpscope.capture's book of active hooks instead of walking past all the later ones.
    """
    with ExitStack() as outer:
        inner = [ExitStack() for _ in rules]
        for stack in reversed(inner):  # the outer stack exits last-in first-out: rule 0 leaves first
            outer.push(stack)
        for stack, rule in zip(inner, rules, strict=True):
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
