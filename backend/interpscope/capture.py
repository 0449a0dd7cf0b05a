"""The one way to hook a shared model, and the one way to reach its lock.

A loaded model is shared by every browser session and command of the process. Every hook Interpscope puts on it
(activation edits, captures, relevance rules and taps, early stops, forward overrides) is registered here and
carries its *owner*: the run scope that registered it, which is the registering thread unless `run_scope()` names
one explicitly. A hook fires only on forward passes run by its owner; on everybody else's it does nothing. So a
plain forward pass from another session sees the model exactly as loaded, whether or not it holds the lock, and
`foreign_hooks(model)` can prove it: it lists every hook on a model that is not scoped this way (tests assert none).

The lock (`model_lock`) serialises work that must not interleave on one instance: gradient passes that switch
parameters' `requires_grad`, rule application, long batch jobs. Plain inference does not need it.

Names are the adapters' TransformerLens-style hook points (`blocks.3.hook_resid_post`, `blocks.3.mlp.hook_post`,
...). `hooks()` attaches edit (or read) functions for a `with` block; `capture()` runs the model once and returns
the activations asked for, optionally stopping the forward pass as soon as it has them.
"""
from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, cast

import torch
from torch import nn

from interpscope.adapters import ModelAdapter


class HoldsModel(Protocol):
    """Anything that carries its model as `.model`: a LoadedModel, an adapter (so this module needs neither)."""

    @property
    def model(self) -> Any: ...


EditFn = Callable[[torch.Tensor], "torch.Tensor | None"]
HookRole = Literal["read", "edit", "rule"]

_SCOPE: contextvars.ContextVar[object | None] = contextvars.ContextVar("interpscope_run_scope", default=None)
_STATE_LOCK = threading.Lock()


def current_owner() -> object:
    """Who is running now: the explicit run scope if one is active, else this thread."""
    scope = _SCOPE.get()
    return scope if scope is not None else threading.get_ident()


@contextmanager
def run_scope() -> Iterator[object]:
    """Name a run explicitly: hooks registered inside fire for forward passes inside, in any thread that runs
    with this context (contextvars.copy_context). Without it, the owner is the thread."""
    scope = object()
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


# --- which owners have which hooks where ----------------------------------------------------------------------------
_ACTIVE: dict[object, list[tuple[weakref.ref[nn.Module], HookRole]]] = {}


def _track(module: nn.Module, role: HookRole, owner: object, add: bool) -> None:
    with _STATE_LOCK:
        entries = _ACTIVE.setdefault(owner, [])
        if add:
            entries.append((weakref.ref(module), role))
        else:
            for i, (ref, r) in enumerate(entries):
                if ref() is module and r == role:
                    del entries[i]
                    break
        if not entries:
            del _ACTIVE[owner]


def editing(model: nn.Module | None = None, owner: object | None = None) -> bool:
    """Whether `owner` (default: the current run) has hooks that change forward values active (on `model`)."""
    owner = current_owner() if owner is None else owner
    with _STATE_LOCK:
        modules = [ref() for ref, role in _ACTIVE.get(owner, []) if role == "edit"]
    modules = [m for m in modules if m is not None]
    if model is None or not modules:
        return bool(modules)
    inside = {id(m) for m in model.modules()}
    return any(id(m) in inside for m in modules)


def assert_unedited(model: nn.Module) -> None:
    """Raise if the current run has edits on `model`: results shared across sessions must come from clean runs."""
    if editing(model):
        raise RuntimeError("a result shared across sessions was about to be computed under an activation edit")


class ScopedHook:
    """A hook that acts only for its owner's forward passes (returns None, i.e. no change, for everyone else)."""

    __slots__ = ("fn", "owner", "role", "__weakref__")

    def __init__(self, fn: Callable, role: HookRole, owner: object | None = None):
        self.fn = fn
        self.role = role
        self.owner = current_owner() if owner is None else owner

    def __call__(self, *args):
        if current_owner() != self.owner:
            return None
        return self.fn(*args)


class Handle:
    """Removes one scoped hook (idempotent) and keeps the per-model bookkeeping right."""

    def __init__(self, module: nn.Module, torch_handle, hook: ScopedHook):
        self.module, self._handle, self.hook = module, torch_handle, hook
        self._removed = False
        _track(module, hook.role, hook.owner, add=True)

    def remove(self) -> None:
        if not self._removed:
            self._removed = True
            self._handle.remove()
            _track(self.module, self.hook.role, self.hook.owner, add=False)


def on_output(module: nn.Module, fn: Callable, *, role: HookRole = "read", prepend: bool = False) -> Handle:
    """Scoped forward hook `fn(module, args, output) -> new output | None`."""
    hook = ScopedHook(fn, role)
    return Handle(module, module.register_forward_hook(hook, prepend=prepend), hook)


def on_input(module: nn.Module, fn: Callable, *, role: HookRole = "read", prepend: bool = False) -> Handle:
    """Scoped forward pre-hook `fn(module, args, kwargs) -> (args, kwargs) | None`."""
    hook = ScopedHook(fn, role)
    return Handle(module, module.register_forward_pre_hook(hook, prepend=prepend, with_kwargs=True), hook)


@contextmanager
def scoped(hooks_to_add: Sequence[tuple[nn.Module, Callable]], *, role: HookRole = "rule",
           kind: Literal["output", "input"] = "output", prepend: bool = False) -> Iterator[None]:
    """Register scoped output (or input) hooks on raw modules for the `with` block; removed on exit, also on error."""
    add = on_output if kind == "output" else on_input
    handles: list[Handle] = []
    try:
        for module, fn in hooks_to_add:
            handles.append(add(module, fn, role=role, prepend=prepend))
        yield
    finally:
        for handle in handles:
            handle.remove()


class _ForwardDispatch:
    """An instance-level `forward` that runs an owner's override for that owner and the original for all others."""

    def __init__(self, original: Callable):
        self.original = original
        self.overrides: dict[object, Callable] = {}

    def __call__(self, *args, **kwargs):
        override = self.overrides.get(current_owner())
        return (override or self.original)(*args, **kwargs)


@contextmanager
def override_forward(module: nn.Module, forward: Callable, *, role: HookRole = "rule") -> Iterator[None]:
    """Replace `module.forward` for the current owner only (e.g. MambaLRP's pure-PyTorch mixer); restored on exit."""
    owner = current_owner()
    with _STATE_LOCK:
        dispatch = module.__dict__.get("forward")
        if not isinstance(dispatch, _ForwardDispatch):
            if dispatch is not None:
                raise RuntimeError(f"{type(module).__name__} already has an instance-level forward not set here")
            dispatch = _ForwardDispatch(module.forward)
            module.__dict__["forward"] = dispatch
        if owner in dispatch.overrides:
            raise RuntimeError(f"{type(module).__name__}.forward is already overridden by this run")
        dispatch.overrides[owner] = forward
    _track(module, role, owner, add=True)
    try:
        yield
    finally:
        with _STATE_LOCK:
            dispatch.overrides.pop(owner, None)
            if not dispatch.overrides and module.__dict__.get("forward") is dispatch:
                del module.__dict__["forward"]
        _track(module, role, owner, add=False)


def scaled_grad_view(tensor: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """A view of `tensor` (the same numbers, no copy) whose gradient is multiplied by `scale` on its way back: a tensor
    hook (torch.mul bound to the scale, no Python frame in the backward) on this pass's own tensor, so it acts on the
    caller's pass only and is gone with the tensor. Used by LRP rules that rescale a module's output gradient."""
    view = tensor.view_as(tensor)
    view.register_hook(partial(torch.mul, other=scale))
    return view


def on_grad(tensor: torch.Tensor, fn: Callable[[torch.Tensor], None]) -> None:
    """Call fn with `tensor`'s gradient once the backward has completed it (all its uses summed). A tensor hook on
    this pass's own tensor: it acts on the caller's pass only and is gone with the tensor. fn reads the gradient and
    returns None (it never replaces it)."""
    tensor.register_hook(fn)


def _first_argument(*args, **kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def resume_after(adapter: ModelAdapter, block: int, hidden: torch.Tensor) -> Iterator[None]:
    """For this run's forward passes inside the block, blocks 0..`block` do not compute: each passes its input on,
    and block `block` returns `hidden` [B, T, d] as its output (the residual stream after it). The embeddings, the
    later blocks, the final norm and the unembedding run as usual, so a pass costs only the rest of the model: what
    a splice at blocks.{block}.hook_resid_post needs once a clean pass has run the start. (Blocks return their
    hidden state as a tensor in the transformers versions this project supports.)"""
    blocks = adapter.blocks()
    if not 0 <= block < len(blocks):
        raise ValueError(f"block {block} out of range 0..{len(blocks) - 1}")

    def inject(*args, **kwargs) -> torch.Tensor:
        return hidden

    with ExitStack() as stack:
        for index in range(block):
            stack.enter_context(override_forward(blocks[index], _first_argument, role="edit"))
        stack.enter_context(override_forward(blocks[block], inject, role="edit"))
        yield


def foreign_hooks(model: nn.Module) -> list[str]:
    """Every hook or forward override on `model` that is not scoped by this module: each could act on any
    session's forward pass. Empty for a model only this module has touched."""
    found = []
    for name, module in model.named_modules():
        tables = [module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
                  getattr(module, "_backward_pre_hooks", {})]
        for table in tables:
            found += [f"{name or '<model>'}: {hook!r}" for hook in table.values() if not isinstance(hook, ScopedHook)]
        forward = module.__dict__.get("forward")
        if forward is not None and not isinstance(forward, _ForwardDispatch):
            found.append(f"{name or '<model>'}: instance forward {forward!r}")
    globals_ = [torch.nn.modules.module._global_forward_hooks, torch.nn.modules.module._global_forward_pre_hooks]
    found += [f"global: {hook!r}" for table in globals_ for hook in table.values()]
    return found


# --- the lock ---------------------------------------------------------------------------------------------------
_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()


def _module_of(model_or_lm: nn.Module | HoldsModel) -> nn.Module:
    """The nn.Module of a LoadedModel, an adapter or a bare model (HF models have a `.model` submodule too)."""
    return model_or_lm if isinstance(model_or_lm, nn.Module) else cast(nn.Module, model_or_lm.model)


def model_lock(model_or_lm: nn.Module | HoldsModel) -> threading.RLock:
    """The re-entrant lock of one model instance (LoadedModel, adapter or bare module all reach the same one)."""
    model = _module_of(model_or_lm)
    with _STATE_LOCK:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


def lock_held(model_or_lm: nn.Module | HoldsModel) -> bool:
    """Whether some thread holds the model's lock right now (used by the model cache to skip busy models)."""
    lock = model_lock(model_or_lm)
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


# --- named hook points -------------------------------------------------------------------------------------------
def _pre_hook(fn: EditFn):
    def hook(module, args, kwargs):
        if args:
            new = fn(args[0])
            if new is not None:
                return (new, *args[1:]), kwargs
        elif "hidden_states" in kwargs:
            new = fn(kwargs["hidden_states"])
            if new is not None:
                return args, dict(kwargs, hidden_states=new)
        return None
    return hook


def _post_hook(fn: EditFn):
    def hook(module, args, output):
        if isinstance(output, tuple):
            new = fn(output[0])
            return None if new is None else (new, *output[1:])
        if hasattr(output, "last_hidden_state") and not isinstance(output, torch.Tensor):
            new = fn(output.last_hidden_state)
            if new is not None:
                output.last_hidden_state = new
            return output
        return fn(output)
    return hook


@contextmanager
def hooks(adapter: ModelAdapter, edits: dict[str, EditFn] | list[tuple[str, EditFn]], *,
          role: HookRole = "edit") -> Iterator[None]:
    """Attach functions to named activations for the `with` block; each sees the tensor and may return a
    replacement. They act on this run's forward passes only; handles are removed on exit, also after an error.
    `role` "read" marks functions that never replace anything (captures)."""
    items = list(edits.items()) if isinstance(edits, dict) else list(edits)
    handles: list[Handle] = []
    try:
        for name, fn in items:
            spec = adapter.resolve(name)
            if spec.kind == "pre":
                handles.append(on_input(spec.module, _pre_hook(fn), role=role))
            else:
                handles.append(on_output(spec.module, _post_hook(fn), role=role))
        yield
    finally:
        for handle in handles:
            handle.remove()


class StopForward(Exception):
    """Raised inside a hook once everything wanted is captured; `capture(stop_early=True)` catches it. Scoped
    hooks raise it only in their owner's forward pass, so no other session is ever stopped."""


@dataclass
class Capture:
    """Logits [T, vocab] of the one sequence run (None after an early stop), and the named activations [T, ...]."""

    logits: torch.Tensor | None
    activations: dict[str, torch.Tensor]

    def require_logits(self) -> torch.Tensor:
        """The logits, which every run without an early stop has."""
        if self.logits is None:
            raise RuntimeError("this capture stopped early: it has no logits")
        return self.logits


def capture(adapter: ModelAdapter, input_ids: torch.Tensor, names: list[str], *, grad: bool = False,
            to_cpu: bool = True, stop_early: bool = False, **forward_kwargs) -> Capture:
    """Run the model on input_ids [1, T] (or [B, T]) and return the named activations (batch dim kept if B > 1).

    stop_early: end the forward pass as soon as every name has been seen (later layers do not run; no logits).
    """
    store: dict[str, torch.Tensor] = {}
    wanted = set(names)

    def keeper(name: str) -> EditFn:
        def keep(tensor: torch.Tensor) -> None:
            store[name] = tensor if grad else tensor.detach()
            if stop_early and wanted <= store.keys():
                raise StopForward
        return keep

    model = adapter.model
    context = torch.enable_grad() if grad else torch.no_grad()
    logits = None
    with context, hooks(adapter, {name: keeper(name) for name in names}, role="read"):
        try:
            logits = model(input_ids=input_ids, use_cache=False, **forward_kwargs).logits
        except StopForward:
            pass
    missing = wanted - store.keys()
    if missing:
        raise RuntimeError(f"the forward pass never reached {sorted(missing)}")
    single = input_ids.shape[0] == 1
    activations = {}
    for name in names:
        tensor = store[name]
        if single and tensor.dim() >= 2 and tensor.shape[0] == 1:
            tensor = tensor[0]
        activations[name] = tensor.cpu() if to_cpu and not grad else tensor
    if logits is not None:
        logits = logits[0] if single else logits
        logits = logits.cpu() if to_cpu and not grad else logits
    return Capture(logits=logits, activations=activations)
