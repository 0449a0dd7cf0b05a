"""Greedy generation with the KV cache, under scoped edits that know which positions they act on.

An edit used while generating is a `RowEdit`: a hook point, the batch rows it acts on, the first absolute position
it acts on (1 by default), the absolute positions it never edits (`skip`: the positions the caller's prompt view
excludes, a prepended BOS and the measured sinks of interpscope.sinks; SAE steering passes start=0 and those, so the
first word is edited when it is not a sink) and a function that replaces the activations of those rows and
positions. The generator runs the prompt once (prefill) and then one token per step from the KV cache,
projecting only the last position onto the vocabulary. Before each forward pass it records the absolute position of
the pass's first token, so an edit "from position 1 on" acts on positions 1.. of the prompt in the prefill and on
every newly generated position, never on position 0: the same activations the uncached recomputation (the whole
sequence every step, `greedy_uncached`) edits, at a fraction of the cost.

Several continuations of one prompt (clean and edited) run as rows of one batch; an edit names its rows. The rows'
prompts can run one by one (`prefill_rows_apart`) so each row's prompt logits are exactly a single-row run's; their
KV caches are then stacked for the batched steps.
Every hook goes through interpscope.capture, so it acts on this run's forward passes only.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from interpscope.capture import hooks

RowFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class RowEdit:
    """Replace the activation at `hook` on batch `rows` (None = all) at absolute positions >= `start`, except
    those in `skip`, by fn(x) (x [n_rows, n_positions, d], same shape back; fn acts on each position alone)."""

    hook: str
    fn: RowFn
    rows: Sequence[int] | None = None
    start: int = 1
    skip: Sequence[int] = ()


@dataclass
class Generation:
    """Greedy tokens [B, n_new], and the logits over the prompt [B, T, vocab] when asked for."""

    tokens: torch.Tensor
    prompt_logits: torch.Tensor | None


class _Pass:
    """What the forward pass being run covers: the absolute position of its first token, and which rows of the
    generation (RowEdit.rows) its batch indices are."""

    def __init__(self, rows: list[int]) -> None:
        self.offset = 0
        self.rows = rows


def _positioned(edit: RowEdit, current: _Pass) -> Callable[[torch.Tensor], torch.Tensor | None]:
    def apply(tensor: torch.Tensor) -> torch.Tensor | None:
        first = max(0, edit.start - current.offset)
        skipped = {p - current.offset for p in edit.skip}
        positions = [i for i in range(first, tensor.shape[1]) if i not in skipped]
        if not positions:
            return None
        if edit.rows is None:
            index = list(range(tensor.shape[0]))
        else:
            index = [i for i, row in enumerate(current.rows) if row in edit.rows]
        if not index:
            return None
        out = tensor.clone()
        if len(positions) == tensor.shape[1] - first:  # one contiguous run from `first` on
            if len(index) == tensor.shape[0]:
                out[:, first:] = edit.fn(tensor[:, first:])
            else:
                rows = torch.as_tensor(index, device=tensor.device)
                out[rows, first:] = edit.fn(tensor[rows, first:])
            return out
        rows = torch.as_tensor(index, device=tensor.device)[:, None]
        at = torch.as_tensor(positions, device=tensor.device)[None, :]
        out[rows, at] = edit.fn(tensor[rows, at])
        return out
    return apply


def _stack_caches(caches: list) -> object | None:
    """One KV cache whose rows are the given single-row caches (each layer's key / value tensors concatenated
    along the batch); None when this kind of cache does not keep them as tensors, or the caches differ in form."""
    layers = getattr(caches[0], "layers", None)
    if not layers:
        return None
    parts = []
    for i in range(len(layers)):
        row = [getattr(cache, "layers", [None] * len(layers))[i] for cache in caches]
        if any(not isinstance(getattr(p, "keys", None), torch.Tensor) or
               not isinstance(getattr(p, "values", None), torch.Tensor) or
               p.keys.shape[1:] != row[0].keys.shape[1:] for p in row):
            return None
        parts.append(row)
    for layer, row in zip(layers, parts, strict=True):
        layer.keys = torch.cat([p.keys for p in row])
        layer.values = torch.cat([p.values for p in row])
    return caches[0]


_PARAMETERS: dict[type[torch.nn.Module], frozenset[str]] = {}


def _parameters(model_class: type[torch.nn.Module]) -> frozenset[str]:
    """The forward's parameter names, per model class (a dict: torch's Module type is not Hashable to mypy)."""
    if model_class not in _PARAMETERS:
        _PARAMETERS[model_class] = frozenset(inspect.signature(model_class.forward).parameters)
    return _PARAMETERS[model_class]


def _keeps_logits(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in _parameters(type(model))


def _cache_kwarg(model: torch.nn.Module) -> str | None:
    """Name of the forward argument taking the KV cache ('cache' in transformers 5, 'past_key_values' before);
    None for models whose cache is not a key/value cache (Mamba's state), which generate without one."""
    parameters = _parameters(type(model))
    if "cache_params" in parameters:
        return None
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    return None


def _logits(model: torch.nn.Module, ids: torch.Tensor, last_only: bool, **kwargs):
    if last_only and _keeps_logits(model):
        return model(input_ids=ids, logits_to_keep=1, **kwargs)
    out = model(input_ids=ids, **kwargs)
    if last_only:
        out.logits = out.logits[:, -1:]
    return out


@torch.inference_mode()
def greedy_generate(adapter, input_ids: torch.Tensor, n_new: int, edits: Sequence[RowEdit] = (),
                    prompt_logits: bool = False, prefill_rows_apart: bool = False,
                    progress: Callable[[int, int], None] | None = None) -> Generation:
    """The next `n_new` greedy tokens of every row of input_ids [B, T] (no padding), with `edits` active, using
    the KV cache; also the prompt's logits [B, T, vocab] if asked. The caller holds the model's lock if it
    needs one (hooks are scoped to this run either way). Runs in inference mode: what it returns carries no
    autograd history and cannot enter a backward pass.

    prefill_rows_apart: run each row's prompt on its own (batch 1) and stack the caches for the batched steps,
    so each row's prompt logits are bit for bit those of a single-row run (a batched matrix product may round the
    rows of one batch differently); same cost as the joint prefill. progress(done, n_new) after each token."""
    model = adapter.model
    n_rows = input_ids.shape[0]
    if n_new == 0 and not prompt_logits:
        return Generation(tokens=input_ids.new_zeros((n_rows, 0)), prompt_logits=None)
    cache_name = _cache_kwarg(model)
    if cache_name is None:
        return greedy_uncached(adapter, input_ids, n_new, edits, prompt_logits)
    use_cache = n_new > 1
    current = _Pass(list(range(n_rows)))
    with hooks(adapter, [(edit.hook, _positioned(edit, current)) for edit in edits]):
        groups = [[row] for row in range(n_rows)] if prefill_rows_apart and n_rows > 1 else [list(range(n_rows))]
        logits_parts: list[torch.Tensor] = []
        last_parts: list[torch.Tensor] = []
        caches: list = []
        for group in groups:
            current.rows = group
            out = _logits(model, input_ids[group], not prompt_logits, use_cache=use_cache)
            if prompt_logits:
                logits_parts.append(out.logits)
            last_parts.append(out.logits[:, -1])
            caches.append(getattr(out, cache_name, None) if use_cache else None)
            del out
        cache = caches[0] if len(caches) == 1 else (_stack_caches(caches) if use_cache else None)
        if use_cache and cache is None:
            current.rows = list(range(n_rows))
            cache = getattr(_logits(model, input_ids, True, use_cache=True), cache_name)
        current.rows = list(range(n_rows))
        logits_all = torch.cat(logits_parts) if prompt_logits else None
        tokens: list[torch.Tensor] = [torch.cat(last_parts).argmax(-1)] if n_new > 0 else []
        if progress is not None and n_new > 0:
            progress(1, n_new)
        for step in range(1, n_new):
            current.offset = input_ids.shape[1] + step - 1
            out = _logits(model, tokens[-1][:, None], True, use_cache=True, **{cache_name: cache})
            cache = getattr(out, cache_name)
            tokens.append(out.logits[:, -1].argmax(-1))
            if progress is not None:
                progress(step + 1, n_new)
    generated = torch.stack(tokens, 1) if tokens else input_ids.new_zeros((n_rows, 0))
    return Generation(tokens=generated, prompt_logits=logits_all)


@torch.inference_mode()
def greedy_uncached(adapter, input_ids: torch.Tensor, n_new: int, edits: Sequence[RowEdit] = (),
                    prompt_logits: bool = False) -> Generation:
    """The same as greedy_generate by recomputing the whole sequence at every step (the reference it is tested
    against, and the path for models without a key/value cache)."""
    model = adapter.model
    current = _Pass(list(range(input_ids.shape[0])))
    sequence = input_ids
    logits_all = None
    with hooks(adapter, [(edit.hook, _positioned(edit, current)) for edit in edits]):
        if prompt_logits or n_new == 0:
            logits_all = model(input_ids=input_ids, use_cache=False).logits if prompt_logits else None
        for _ in range(n_new):
            logits = _logits(model, sequence, True, use_cache=False).logits[:, -1]
            sequence = torch.cat([sequence, logits.argmax(-1)[:, None]], dim=1)
    return Generation(tokens=sequence[:, input_ids.shape[1]:], prompt_logits=logits_all)
