"""One capture API over every model: run tokens, read (or edit) named activations.

Names are the adapters' TransformerLens-style hook points (`blocks.3.hook_resid_post`, `blocks.3.mlp.hook_post`,
...). `hooks()` registers edit functions for the duration of a `with` block; `capture()` runs the model once and
returns the activations asked for.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from backend.adapters import ModelAdapter

EditFn = Callable[[torch.Tensor], "torch.Tensor | None"]


def _pre_hook(fn: EditFn):
    def hook(module, args, kwargs):
        if args:
            new = fn(args[0])
            if new is not None:
                return (new, *args[1:]), kwargs
        elif "hidden_states" in kwargs:
            new = fn(kwargs["hidden_states"])
            if new is not None:
                kwargs = dict(kwargs, hidden_states=new)
                return args, kwargs
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
def hooks(adapter: ModelAdapter, edits: dict[str, EditFn] | list[tuple[str, EditFn]]) -> Iterator[None]:
    """Attach functions to named activations; each sees the tensor and may return a replacement.

    Handles are removed on exit, also after an exception.
    """
    items = list(edits.items()) if isinstance(edits, dict) else list(edits)
    handles = []
    try:
        for name, fn in items:
            spec = adapter.resolve(name)
            if spec.kind == "pre":
                handles.append(spec.module.register_forward_pre_hook(_pre_hook(fn), with_kwargs=True))
            else:
                handles.append(spec.module.register_forward_hook(_post_hook(fn)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Capture:
    """Logits [T, vocab] of the one sequence run, and the named activations, each [T, ...]."""

    logits: torch.Tensor
    activations: dict[str, torch.Tensor]


def capture(adapter: ModelAdapter, input_ids: torch.Tensor, names: list[str], *, grad: bool = False,
            to_cpu: bool = True, **forward_kwargs) -> Capture:
    """Run the model on input_ids [1, T] (or [B, T]) and return the named activations (batch dim kept if B > 1)."""
    store: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> EditFn:
        def keep(tensor: torch.Tensor) -> None:
            store[name] = tensor if grad else tensor.detach()
        return keep

    model = adapter.model
    context = torch.enable_grad() if grad else torch.no_grad()
    with context, hooks(adapter, {name: keeper(name) for name in names}):
        output = model(input_ids=input_ids, use_cache=False, **forward_kwargs)
    logits = output.logits
    single = input_ids.shape[0] == 1
    activations = {}
    for name in names:
        tensor = store[name]
        if single and tensor.dim() >= 2 and tensor.shape[0] == 1:
            tensor = tensor[0]
        activations[name] = tensor.cpu() if to_cpu and not grad else tensor
    logits = logits[0] if single else logits
    return Capture(logits=logits.cpu() if to_cpu and not grad else logits, activations=activations)
