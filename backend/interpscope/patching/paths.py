"""Path patching between two components, and patching several cells in one run.

Path patching (Wang et al., 2022, in the denoising direction used here): how much of the clean metric comes back
when the sender's clean output reaches the receiver, and nothing else. Two passes on the corrupt prompt:
A. the sender's output is set to its clean value (at every position); every component between sender and receiver
   is frozen at its corrupt value, so the only change reaching the receiver's input is the sender's, through the
   residual stream; the receiver's output in this pass is recorded;
B. the receiver's output is set to what A recorded; everything downstream recomputes. The metric of B, normalised
   (1 = clean, 0 = corrupt), is the path's effect. With the receiver 'logits' pass A is the answer: the sender's
   direct effect on the metric.
Components: 'L<l>.H<h>' (a head's output, its slice of o_proj's input), 'L<l>.attn', 'L<l>.mlp', and, as a receiver
only, 'logits'. The receiver must read the sender's output: a later layer, or the MLP of the sender's own layer.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

import torch

from interpscope.adapters import ModelAdapter
from interpscope.capture import hooks, scoped
from interpscope.config import InterpscopeError
from interpscope.patching.patching import (
    Activations,
    Cell,
    head_slice,
    input_edit,
    last_logits,
    out_projections,
    point_names,
)
from interpscope.patching.prompts import Metric

_COMPONENT = re.compile(r"^l(\d+)\.?(?:h(\d+)|(attn|mlp))$")


@dataclass(frozen=True)
class Component:
    """A head ('head', layer, head), a layer's attention or MLP output ('attn' / 'mlp', layer) or the logits."""

    kind: str
    layer: int
    head: int | None = None

    @property
    def label(self) -> str:
        if self.kind == "logits":
            return "logits"
        return f"L{self.layer}.H{self.head}" if self.kind == "head" else f"L{self.layer}.{self.kind}"

    def order(self) -> tuple[int, int]:
        """Where it reads in the forward pass: (layer, 0 attention side / 1 MLP)."""
        return self.layer, 1 if self.kind == "mlp" else 0


def parse_component(text: str, adapter: ModelAdapter, receiver: bool = False) -> Component:
    """'L3.H2', 'L3.attn', 'L3.mlp' (or 'logits' for a receiver), checked against the model's size."""
    cleaned = text.strip().lower().replace(" ", "")
    if cleaned == "logits":
        if not receiver:
            raise InterpscopeError("'logits' can only be a receiver; a sender is a head, attention or MLP output.")
        return Component("logits", adapter.n_layers)
    match = _COMPONENT.match(cleaned)
    if not match:
        raise InterpscopeError(f"Cannot read the component {text!r}: write L<layer>.H<head> (a head), L<layer>.attn, "
                               "L<layer>.mlp" + (" or logits." if receiver else "."))
    layer = int(match.group(1))
    if layer >= adapter.n_layers:
        raise InterpscopeError(f"{text!r}: this model has layers 0..{adapter.n_layers - 1}.")
    if match.group(2) is not None:
        head = int(match.group(2))
        if head >= adapter.n_heads:
            raise InterpscopeError(f"{text!r}: this model has heads 0..{adapter.n_heads - 1} per layer.")
        return Component("head", layer, head)
    return Component(match.group(3), layer)


def check_path(sender: Component, receiver: Component) -> None:
    if receiver.kind != "logits" and receiver.order() <= sender.order():
        raise InterpscopeError(f"{receiver.label} does not read {sender.label}'s output: the receiver must come later "
                               "(a later layer, or the MLP of the sender's own layer).")


def _set_output(adapter: ModelAdapter, component: Component, value: torch.Tensor):
    """The edit hook setting a component's output (every position) to `value` ([T, d] or, for a head, [T, d_head])."""
    if component.kind == "head":
        part = head_slice(adapter, component.head or 0)

        def put_head(tensor: torch.Tensor) -> torch.Tensor:
            out = tensor.clone()
            out[..., part] = value.to(out.dtype)
            return out
        return scoped([(out_projections(adapter)[component.layer], input_edit(put_head))], role="edit", kind="input")
    name = point_names(adapter)[component.kind][component.layer]
    return hooks(adapter, [(name, lambda tensor: value.to(tensor.dtype).expand_as(tensor).clone())])


def _output(adapter: ModelAdapter, acts: Activations, component: Component) -> torch.Tensor:
    if component.kind == "head":
        return acts.heads[component.layer][:, head_slice(adapter, component.head or 0)]
    return getattr(acts, component.kind)[component.layer]


def _between(adapter: ModelAdapter, sender: Component, receiver: Component) -> list[Component]:
    """The attention and MLP outputs that read after the sender and before the receiver (frozen in pass A)."""
    found = []
    for layer in range(sender.layer, min(receiver.layer, adapter.n_layers - 1) + 1):
        for kind in ("attn", "mlp"):
            part = Component(kind, layer)
            if sender.order() < part.order() and (receiver.kind == "logits" or part.order() < receiver.order()):
                found.append(part)
    return found


def path_value(adapter: ModelAdapter, ids: torch.Tensor, metric: Metric, clean: Activations, corrupt: Activations,
               sender: Component, receiver: Component) -> float:
    """The raw metric after path patching sender -> receiver (two passes; the caller holds the model's lock)."""
    check_path(sender, receiver)
    recorded: dict[str, torch.Tensor] = {}
    with ExitStack() as stack, torch.no_grad():
        stack.enter_context(_set_output(adapter, sender, _output(adapter, clean, sender)))
        for part in _between(adapter, sender, receiver):
            stack.enter_context(_set_output(adapter, part, _output(adapter, corrupt, part)))
        if receiver.kind != "logits":
            stack.enter_context(_recorder(adapter, receiver, recorded))
        logits_a = last_logits(adapter, ids)
    if receiver.kind == "logits":
        return float(metric.value(logits_a[0]))
    with torch.no_grad(), _set_output(adapter, receiver, recorded["out"]):
        return float(metric.value(last_logits(adapter, ids)[0]))


def _recorder(adapter: ModelAdapter, component: Component, into: dict[str, torch.Tensor]):
    if component.kind == "head":
        part = head_slice(adapter, component.head or 0)

        def keep_head(module, args, kwargs) -> None:
            into["out"] = (args[0] if args else kwargs["hidden_states"])[0, :, part].detach()
        return scoped([(out_projections(adapter)[component.layer], keep_head)], role="read", kind="input")

    def keep(tensor: torch.Tensor) -> None:
        into["out"] = tensor[0].detach()
    return hooks(adapter, [(point_names(adapter)[component.kind][component.layer], keep)], role="read")


def patched_together(adapter: ModelAdapter, ids: torch.Tensor, metric: Metric, clean: Activations,
                     cells: list[Cell]) -> float:
    """The raw metric of the corrupt prompt ids [1, T] with every cell in `cells` patched at once (none: the corrupt
    run). A heads cell patches that head at every position."""
    groups: dict[tuple[str, int], list[int]] = {}
    for cell in cells:
        groups.setdefault((cell.kind, cell.row), []).append(cell.column)
    with ExitStack() as stack, torch.no_grad():
        for (kind, row), columns in groups.items():
            if kind == "heads":
                source = clean.heads[row]
                index = torch.cat([torch.arange(head_slice(adapter, c).start, head_slice(adapter, c).stop)
                                   for c in columns]).to(source.device)
                stack.enter_context(scoped([(out_projections(adapter)[row], input_edit(_columns_from(source, index)))],
                                           role="edit", kind="input"))
            else:
                where = torch.tensor(columns, device=ids.device)
                stack.enter_context(hooks(adapter, [(point_names(adapter)[kind][row],
                                                     _rows_from(getattr(clean, kind)[row], where))]))
        return float(metric.value(last_logits(adapter, ids)[0]))


def _rows_from(source: torch.Tensor, positions: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    def put(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        out[:, positions] = source[positions].to(out.dtype)
        return out
    return put


def _columns_from(source: torch.Tensor, features: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    def put(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        out[..., features] = source[:, features].to(out.dtype)
        return out
    return put
