"""One forward + one backward pass that gives relevance at every tensor asked for.

Under a rule set (interpscope.relevance.rules), relevance at a tensor h is h * dy/dh (modified gradient) summed over
the hidden dimension. The engine taps the input embeddings (as a leaf), the residual stream at every block, each
head's output (input of the attention output projection), the MLP neurons (input of the down projection), the
q/k/v projection outputs (for the latent views; the conservation readout alone taps each attention's input instead),
the biases and any extra hook point, then asks autograd for all their gradients at once.

Taps are forward hooks registered *before* the rules' hooks (prepend), so they see each module's raw output and its
gradient includes the rule's factor: the relevance that module's output passes back.
"""
from __future__ import annotations

import gc
import inspect
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from torch import nn

from interpscope.adapters import ModelAdapter
from interpscope.capture import Handle, on_grad, on_input, on_output
from interpscope.relevance.rules import Rule, adapter_memo, applied
from interpscope.relevance.targets import ExplainedValue, PendingTarget, Target


@dataclass
class Conservation:
    """Where the explained value y went: inputs, biases (incl. position embeddings), softmax (AttnLRP only).

    softmax_sum, softmax_by_layer and gap_without_softmax are None for a model without attention (Mamba): there is
    no softmax to drop a share, so the value does not apply (absent from the JSON document, not 0). bias_sum is None
    for a model with no bias parameter and no learned position embedding (Llama, SmolLM2): nothing there can absorb
    relevance, so the share does not apply either."""

    target_logit: float
    input_sum: float
    bias_sum: float | None
    softmax_sum: float | None
    relative_error: float
    gap_without_softmax: float | None
    softmax_by_layer: list[float] | None = field(default_factory=list)


@dataclass
class Completeness:
    """Integrated Gradients' law: relevance sums to f(x) - f(baseline), up to the integral's discretisation gap."""

    value: float
    baseline_value: float
    relevance_sum: float
    gap: float
    relative_gap: float
    steps: int
    baseline: str = "zero"
    baseline_label: str = "all-zero embeddings"
    half_steps: int | None = None  # the same integral at steps // 2: does the gap shrink with more steps?
    half_gap: float | None = None


@dataclass
class LatentRelevance:
    """Relevance inside the model for one target.

    residual: [n_layers + 1, T], row l = input of block l, last row = output of the last block.
    heads: [n_layers, n_heads] summed over tokens; neurons: [n_layers, d_mlp] summed over tokens.
    heads_by_position: [n_layers, T, n_heads], each head's output at each (query) position.
    mlp_by_position: [n_layers, T], each MLP's neurons summed at each position.
    values_by_position: [n_layers, T, n_kv_heads], what reaches each (key) position's values, per key/value head.
    """

    residual: np.ndarray
    heads: np.ndarray | None
    neurons: np.ndarray | None
    heads_by_position: np.ndarray | None = None
    mlp_by_position: np.ndarray | None = None
    values_by_position: np.ndarray | None = None


@dataclass
class Attribution:
    relevance: np.ndarray
    logit: float
    conservation: Conservation | None
    latent: LatentRelevance | None
    points: dict[str, np.ndarray] = field(default_factory=dict)
    completeness: Completeness | None = None
    target: Target | None = None
    output_logits: torch.Tensor | None = None


def _first(value) -> torch.Tensor:
    return value[0] if isinstance(value, tuple) else getattr(value, "last_hidden_state", value)


class _Taps:
    """Forward hooks that record named tensors for one forward pass."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.registered: set[str] = set()
        self.handles: list[Handle] = []

    def output(self, module: nn.Module, name: str, leaf: bool = False) -> None:
        self.registered.add(name)
        def hook(mod, args, output):
            tensor = _first(output)
            if leaf:
                tensor = tensor.detach().requires_grad_(True)
                self.tensors[name] = tensor
                return tensor if not isinstance(output, tuple) else (tensor, *output[1:])
            self.tensors[name] = tensor
            return None
        self.handles.append(on_output(module, hook, role="rule" if leaf else "read", prepend=True))

    def input(self, module: nn.Module, name: str) -> None:
        self.registered.add(name)
        def hook(mod, args, kwargs):
            self.tensors[name] = args[0] if args else kwargs["hidden_states"]
        self.handles.append(on_input(module, hook, prepend=True))

    def own_input(self, module: nn.Module, name: str) -> None:
        """Tap what `module` receives as a view of its own, so the view's gradient is what flows back through this
        module alone (the same tensor may feed other modules, e.g. a parallel MLP)."""
        self.registered.add(name)
        def hook(mod, args, kwargs):
            if args and isinstance(args[0], torch.Tensor):
                view = self.tensors[name] = args[0].view_as(args[0])
                return (view, *args[1:]), kwargs
            if isinstance(kwargs.get("hidden_states"), torch.Tensor):
                view = self.tensors[name] = kwargs["hidden_states"].view_as(kwargs["hidden_states"])
                return args, {**kwargs, "hidden_states": view}
            raise RuntimeError(f"{type(mod).__name__} was called without its hidden states as the first argument "
                               "or as hidden_states: the conservation readout cannot tap its input")
        self.handles.append(on_input(module, hook, role="rule", prepend=True))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()  # the hooks' closures hold self: no cycle left for the garbage collector


@contextmanager
def _bias_grads(biases: Sequence[nn.Parameter]) -> Iterator[None]:
    """Let biases receive gradients for the duration (restoring their requires_grad flags)."""
    frozen = [b for b in biases if not b.requires_grad]
    try:
        for bias in frozen:
            bias.requires_grad_(True)
        yield
    finally:
        for bias in frozen:
            bias.requires_grad_(False)


class _CyclePause:
    """The cyclic garbage collector held off while any relevance pass runs (a count, so overlapping passes in
    several threads nest), then restored as it was found.

    A pass keeps a few thousand small Python objects alive (hooks, their handles, the rules' autograd contexts),
    enough to trigger collections that walk the whole heap, the model's ~370,000 objects included: measured on
    SmolLM2, one full collection every ~10 passes and ~23 ms a pass on average. Everything the pass allocates is
    freed by reference counting when it ends (no reference cycles: tests/relevance/test_relevance_lean.py checks), so
    nothing is left for the collector to do afterwards.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._was_enabled:
                    gc.enable()


_cycle_collection_paused = _CyclePause()


_BIASES: weakref.WeakKeyDictionary[nn.Module, tuple[nn.Parameter, ...]] = weakref.WeakKeyDictionary()


def bias_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Additive parameters (named *bias): each absorbs b * grad_b of the relevance.

    Found once per model instance (walking every module costs ~3 ms a pass on SmolLM2) and kept while it lives:
    Interpscope changes what a loaded model computes through hooks, never by replacing its modules or parameters."""
    cached = _BIASES.get(model)
    if cached is None:
        seen: set[int] = set()
        found = []
        for name, param in model.named_parameters():
            if name.endswith("bias") and id(param) not in seen:
                seen.add(id(param))
                found.append(param)
        cached = _BIASES[model] = tuple(found)
    return list(cached)


def _supports_logits_to_keep(model: nn.Module) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def forward_logits(model: nn.Module, embeds: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """Logits [B, len(positions), vocab] given input embeddings [B, T, d]; only those positions are projected."""
    index = torch.tensor(list(positions), device=embeds.device)
    if _supports_logits_to_keep(model):
        return model(inputs_embeds=embeds, use_cache=False, logits_to_keep=index).logits
    return model(inputs_embeds=embeds, use_cache=False).logits[:, index]


def _relevance(tensor: torch.Tensor, grad: torch.Tensor | None) -> torch.Tensor:
    """Elementwise h * grad in float64 (zeros where no gradient reached)."""
    if grad is None:
        return torch.zeros_like(tensor, dtype=torch.float64)
    return tensor.detach().double() * grad.double()


def _relevance_sum(tensor: torch.Tensor, grad: torch.Tensor | None) -> float:
    """sum(h * grad) summed in float64, without the per-element float64 tensor: the products are formed at the
    tensors' precision (each within half a unit in the last place) and accumulated in float64, which is where a long
    float32 sum would lose digits. Half the cost of converting both tensors to float64 first (measured: 54 vs 99 us for
    one head-sized and one key-sized pair; 120 such sums a pass on SmolLM2), with the books unchanged to ~1e-8."""
    if grad is None:
        return 0.0
    return float(torch.sum(tensor.detach() * grad, dtype=torch.float64))


def _sum_into(sums: dict[str, torch.Tensor], name: str, tensor: torch.Tensor, grad: torch.Tensor) -> None:
    """A tap's tensor hook: sum(h * grad) as _relevance_sum forms it, kept (as a 0-dim float64 tensor) under name."""
    sums[name] = torch.sum(tensor * grad, dtype=torch.float64)


def _qkv(adapter: ModelAdapter, layer: int) -> list[tuple[nn.Module, dict[str, torch.Tensor]]]:
    """adapter.attention_qkv(layer), looked up once per adapter (it builds index tensors on every call)."""
    return adapter_memo(adapter, ("attention-qkv", layer), lambda: adapter.attention_qkv(layer))


def _into_qkv(adapter: ModelAdapter, layer: int, into_input: float,
              bias_grads: Mapping[int, torch.Tensor | None]) -> float:
    """Relevance the q/k/v projections' outputs pass back, from the attention's input: for y = W h + b,
    sum(y * g) = sum(h * W^T g) + sum(b * g), and W^T g is the gradient at h through the attention (its own view of
    h, which feeds only the projections), so the projections' books are the input's plus their biases' (already in
    the biases' share). Equal to tapping every projection's output to rounding
    (tests/relevance/test_relevance_lean.py)."""
    total = into_input
    for module, _ in _qkv(adapter, layer):
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor) and id(bias) in bias_grads:
            total += _relevance_sum(bias, bias_grads[id(bias)])
    return total


def _value_relevance(adapter: ModelAdapter, per_tensor: dict, layer: int, n_tokens: int) -> np.ndarray:
    """[T, n_kv_heads]: relevance at each position's value vectors, per key/value head (fused or separate v)."""
    for i, (_, parts) in enumerate(_qkv(adapter, layer)):
        if "v" in parts:
            values = per_tensor[f"qkv.{layer}.{i}"][0][:, parts["v"].to(per_tensor[f"qkv.{layer}.{i}"].device)]
            return values.reshape(n_tokens, -1, adapter.d_head).sum(-1).cpu().numpy()
    return np.zeros((n_tokens, 0))


def attribute(adapter: ModelAdapter, input_ids: torch.Tensor, target: ExplainedValue | PendingTarget,
              rules: Sequence[Rule], *, latent: bool = False, conservation: bool = True, points: Sequence[str] = (),
              extra: dict[str, torch.Tensor] | None = None) -> Attribution:
    """Relevance of every input token for `target` under `rules` ([] = plain Gradient x Input).

    The caller holds the model's lock. `points`: extra hook-point names whose relevance [T, ...] is returned.
    A PendingTarget is resolved from this pass's own logits (rules change no forward value), and the result
    carries the target and those logits (`output_logits`, [vocab], detached), so nothing runs the model twice.
    `extra`: a dict the caller's own hooks fill with named tensors during the forward pass (e.g. an SAE's feature
    activations and error term); their relevance (tensor x gradient, per element) is returned in `points` too.
    """
    model = adapter.model
    n_layers = adapter.n_layers
    taps = _Taps()
    biases = bias_parameters(model) if conservation else []
    with ExitStack() as stack, torch.enable_grad():
        stack.enter_context(_cycle_collection_paused())
        stack.callback(taps.remove)  # after the rules leave: both remove their hooks oldest first (cheapest)
        stack.enter_context(applied(adapter, rules))
        stack.enter_context(_bias_grads(biases))
        position_embedding = adapter.position_embedding()
        if position_embedding is not None:
            taps.output(position_embedding, "pos_embed", leaf=True)
        attn_layers = [layer for layer in range(n_layers) if adapter.attention_out_proj(layer) is not None]
        qkv_names: dict[int, list[str]] = {}  # per attention layer, the taps on its q/k/v projections
        if conservation or latent:
            for layer in attn_layers:
                if (out_proj := adapter.attention_out_proj(layer)) is not None:  # always, in attn_layers
                    taps.input(out_proj, f"heads.{layer}")
                attention = adapter.attention(layer)
                if not latent and attention is not None:
                    # what enters q/k/v is booked at the attention's input: one tap a layer instead of one per
                    # projection (see _into_qkv); the latent views need the values per head, so they tap each
                    taps.own_input(attention, f"attn_in.{layer}")
                    continue
                projections = _qkv(adapter, layer)
                qkv_names[layer] = [f"qkv.{layer}.{i}" for i in range(len(projections))]
                for (module, _), name in zip(projections, qkv_names[layer], strict=True):
                    taps.output(module, name)
        if latent:
            for layer in range(n_layers):
                taps.input(adapter.blocks()[layer], f"resid.{layer}")
                out_proj, down = adapter.attention_out_proj(layer), adapter.mlp_down(layer)
                if out_proj is not None and f"heads.{layer}" not in taps.registered:
                    taps.input(out_proj, f"heads.{layer}")
                if down is not None:
                    taps.input(down, f"neurons.{layer}")
            taps.output(adapter.blocks()[n_layers - 1], f"resid.{n_layers}")
        for name in points:
            spec = adapter.resolve(name)
            (taps.input if spec.kind == "pre" else taps.output)(spec.module, f"point.{name}")

        embeds = adapter.embedding()(input_ids).detach().requires_grad_(True)
        logits = forward_logits(model, embeds, [target.position])[0, 0]
        resolved = target.resolve(logits.detach()) if isinstance(target, PendingTarget) else target
        value = resolved.value(logits)
        for name, tensor in (extra or {}).items():
            taps.tensors[f"extra.{name}"] = tensor
        # per element only where a view needs it; the conservation readout needs sums alone, and those are taken
        # in the backward itself as each tap's gradient is complete (a tensor hook), so no tap's gradient is held to
        # the end of the pass as autograd.grad's outputs would be (60 [T, d] tensors a pass on SmolLM2)
        summed_only = set() if latent else {n for n in taps.tensors if n.startswith(("heads.", "qkv.", "attn_in."))}
        sums: dict[str, torch.Tensor] = {}
        for name in summed_only:
            on_grad(taps.tensors[name], partial(_sum_into, sums, name, taps.tensors[name].detach()))
        names = [n for n in taps.tensors if n not in summed_only]
        inputs = [embeds, *(taps.tensors[n] for n in names), *biases]
        grads = torch.autograd.grad(value, inputs, allow_unused=True)

    y = float(value.detach().double())
    embed_relevance = _relevance(embeds, grads[0])[0].sum(-1)
    tap_grads = dict(zip(names, grads[1:1 + len(names)], strict=True))
    per_tensor = {n: _relevance(taps.tensors[n], tap_grads[n]) for n in names}

    def total(name: str) -> float:
        if name in summed_only:
            return float(sums[name]) if name in sums else 0.0  # no gradient reached it: nothing passed through
        return float(per_tensor[name].sum())

    # the token target it explained; a value read inside the pass (an SAE feature) is no token target
    result = Attribution(relevance=embed_relevance.cpu().numpy(), logit=y, conservation=None, latent=None,
                         target=resolved if isinstance(resolved, Target) else None, output_logits=logits.detach())
    if conservation:
        bias_total = float(sum(_relevance_sum(b, g) for b, g in zip(biases, grads[1 + len(names):], strict=True)))
        if "pos_embed" in per_tensor:
            bias_total += total("pos_embed")
        bias_grads = {id(b): g for b, g in zip(biases, grads[1 + len(names):], strict=True)}
        softmax = []
        for layer in attn_layers:
            into_heads = total(f"heads.{layer}")
            if layer in qkv_names:
                into_qkv = sum(total(name) for name in qkv_names[layer])
            else:
                into_qkv = _into_qkv(adapter, layer, total(f"attn_in.{layer}"), bias_grads)
            softmax.append(into_heads - into_qkv)
        input_sum = float(embed_relevance.sum())
        explained = input_sum + bias_total + sum(softmax)
        scale = abs(y) if y != 0 else 1.0
        has_softmax = bool(attn_layers)  # no attention, no softmax share: absent, not 0
        result.conservation = Conservation(
            target_logit=y, input_sum=input_sum, bias_sum=bias_total if biases or "pos_embed" in per_tensor else None,
            softmax_sum=float(sum(softmax)) if has_softmax else None, relative_error=abs(explained - y) / scale,
            gap_without_softmax=(y - input_sum - bias_total) / scale if has_softmax else None,
            softmax_by_layer=softmax if has_softmax else None)
    if latent:
        residual = torch.stack([per_tensor[f"resid.{layer}"][0].sum(-1) for layer in range(n_layers + 1)])
        heads = None
        if attn_layers:
            heads = torch.stack([per_tensor[f"heads.{layer}"][0].reshape(input_ids.shape[1], adapter.n_heads, -1)
                                 .sum(dim=(0, 2)) for layer in attn_layers]).cpu().numpy()
        neuron_names = [f"neurons.{layer}" for layer in range(n_layers)]
        has_neurons = all(n in per_tensor for n in neuron_names)
        neurons = torch.stack([per_tensor[n][0].sum(0) for n in neuron_names]).cpu().numpy() if has_neurons else None
        result.latent = LatentRelevance(residual=residual.cpu().numpy(), heads=heads, neurons=neurons)
        n_tokens = input_ids.shape[1]
        if attn_layers:
            result.latent.heads_by_position = torch.stack([
                per_tensor[f"heads.{layer}"][0].reshape(n_tokens, adapter.n_heads, -1).sum(-1)
                for layer in attn_layers]).cpu().numpy()
            result.latent.values_by_position = np.stack([_value_relevance(adapter, per_tensor, layer, n_tokens)
                                                         for layer in attn_layers])
        if has_neurons:
            result.latent.mlp_by_position = torch.stack([per_tensor[n][0].sum(-1) for n in neuron_names]).cpu().numpy()
    for name in [*points, *(f"extra.{n}" for n in (extra or {}))]:
        tensor = per_tensor[name if name.startswith("extra.") else f"point.{name}"]
        key = name[len("extra."):] if name.startswith("extra.") else name
        result.points[key] = (tensor[0] if tensor.dim() > 2 and tensor.shape[0] == 1 else tensor).cpu().numpy()
    return result


def gradient_only(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target) -> torch.Tensor:
    """Plain gradient of the target w.r.t. the input embeddings: the cost reference for the benchmark."""
    with torch.enable_grad():
        embeds = adapter.embedding()(input_ids).detach().requires_grad_(True)
        value = target.value(forward_logits(adapter.model, embeds, [target.position])[0, 0])
        (grad,) = torch.autograd.grad(value, [embeds])
    return grad
