"""Activation patching (denoising): run the corrupt prompt with one clean activation put back, read the metric.

Grids, one forward pass per cell, many cells per batched pass:
- resid [n_layers + 1, T]: the residual stream entering block l (resid_pre) at one position; the last row is the
  final residual (after the last block, before the final norm).
- attn [n_layers, T] / mlp [n_layers, T]: one layer's attention (MLP) output at one position, as it joins the residual.
- heads [n_layers, n_heads]: one head's output at every position, i.e. its slice of the attention output
  projection's input (o_proj's input is the heads' outputs, concatenated head by head).

A cell whose clean and corrupt activations are identical (positions before the first differing token) is the
corrupt run itself: its value is the corrupt metric, with no pass run. Every other cell starts where its patch is:
blocks before layer l compute nothing (interpscope.capture.resume_after hands block l the corrupt residual, with the
clean row already in place for resid cells), and only the last position is projected onto the vocabulary. Positions
before a batch's first patched position are the corrupt run's in every block, so where the model takes a key/value
cache (decoder-only, no sliding window) they are not recomputed either: the corrupt run's keys and values up to there
are handed in as the cache, and only the later positions run. All hooks
go through interpscope.capture, scoped to this run; the caller holds the model's lock.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.capture import EditFn, hooks, override_forward, resume_after, scoped
from interpscope.patching.prompts import Metric
from interpscope.progress import Progress

KINDS = ("resid", "attn", "mlp", "heads")
KIND_LABELS = {"resid": "Residual stream", "attn": "Attention output", "mlp": "MLP output", "heads": "Attention heads"}


@dataclass
class Activations:
    """One run's activations on one prompt: resid [n_layers + 1] x [T, d] (resid_pre of each block, then the final
    residual), attn / mlp [n_layers] x [T, d] (as they join the residual), heads [n_layers] x [T, n_heads * d_head]
    (o_proj's input), and the logits [vocab] after the last token."""

    resid: list[torch.Tensor]
    attn: list[torch.Tensor]
    mlp: list[torch.Tensor]
    heads: list[torch.Tensor]
    logits: torch.Tensor
    keys_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per block [1, kv_heads, T, d_head]; None
    # where the model takes no plain key/value cache (then every patched pass runs every position)


def point_names(adapter: ModelAdapter) -> dict[str, list[str]]:
    """The hook points of each kind (resid, attn, mlp), in layer order."""
    n = adapter.n_layers
    return {"resid": [*(f"blocks.{layer}.hook_resid_pre" for layer in range(n)), f"blocks.{n - 1}.hook_resid_post"],
            "attn": [f"blocks.{layer}.hook_attn_out" for layer in range(n)],
            "mlp": [f"blocks.{layer}.hook_mlp_out" for layer in range(n)]}


def out_projections(adapter: ModelAdapter) -> list[torch.nn.Module]:
    """Each layer's attention output projection (its input holds the heads' outputs)."""
    found = [adapter.attention_out_proj(layer) for layer in range(adapter.n_layers)]
    if any(module is None for module in found):
        raise ValueError(f"{adapter.family} models have no attention output projection to patch heads at")
    return [module for module in found if module is not None]


def first_argument(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def input_edit(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    """A forward pre-hook (with kwargs) that replaces a module's first input by fn(input)."""
    def hook(module, args, kwargs):
        new = fn(first_argument(args, kwargs))
        return ((new, *args[1:]), kwargs) if args else (args, dict(kwargs, hidden_states=new))
    return hook


def cache_argument(model: torch.nn.Module) -> str | None:
    """The keyword a decoder-only model takes its key/value cache by ('cache' in transformers 5, 'past_key_values'
    before), or None where prefix reuse is not safe: encoder-decoders, sliding-window or hybrid attention."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False) or getattr(config, "sliding_window", None) \
            or any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])):
        return None
    parameters = inspect.signature(model.forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in parameters), None)


def _last_only(model: torch.nn.Module) -> dict:
    from interpscope.relevance.engine import _supports_logits_to_keep

    return {"logits_to_keep": 1} if _supports_logits_to_keep(model) else {}


def last_logits(adapter: ModelAdapter, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """Logits [B, vocab] after the last token of ids [B, T] (only that position is projected)."""
    model = adapter.model
    return model(input_ids=ids, use_cache=False, **_last_only(model), **kwargs).logits[:, -1]


def _keys_values(adapter: ModelAdapter, ids: torch.Tensor) -> tuple[torch.Tensor,
                                                                   list[tuple[torch.Tensor, torch.Tensor]] | None]:
    """(last logits [1, vocab], each block's keys and values [1, kv_heads, T, d_head] or None) of one pass on ids."""
    model, name = adapter.model, cache_argument(adapter.model)
    if name is None:
        return last_logits(adapter, ids), None
    out = model(input_ids=ids, use_cache=True, **_last_only(model))
    cache = getattr(out, name, None)
    layers = getattr(cache, "layers", None)
    n_tokens = ids.shape[1]
    if layers is None or len(layers) != adapter.n_layers or any(
            getattr(layer, "keys", None) is None or layer.keys.shape[-2] != n_tokens for layer in layers):
        return out.logits[:, -1], None
    return out.logits[:, -1], [(layer.keys.detach(), layer.values.detach()) for layer in layers]


def prefix_cache(adapter: ModelAdapter, keys_values: list[tuple[torch.Tensor, torch.Tensor]], start: int,
                 batch: int) -> dict:
    """The keyword argument handing every block the first `start` positions' keys and values ([batch] copies)."""
    from transformers import DynamicCache

    name = cache_argument(adapter.model)
    assert name is not None
    cache = DynamicCache()
    for layer, (keys, values) in enumerate(keys_values):
        cache.update(keys[..., :start, :].expand(batch, -1, -1, -1).contiguous(),
                     values[..., :start, :].expand(batch, -1, -1, -1).contiguous(), layer)
    return {name: cache}


def record(adapter: ModelAdapter, ids: torch.Tensor, heads: bool = True, keys_values: bool = False) -> Activations:
    """Every activation patching reads, from one plain forward pass on ids [1, T] (read hooks only); keys_values:
    also each block's keys and values (what patched passes resume from), where the model has a plain cache."""
    names = point_names(adapter)
    store: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable[[torch.Tensor], None]:
        def fn(tensor: torch.Tensor) -> None:
            store[name] = tensor[0].detach()
        return fn

    def keep_input(layer: int) -> Callable:
        def fn(module, args, kwargs) -> None:
            store[f"heads.{layer}"] = first_argument(args, kwargs)[0].detach()
        return fn

    edits: list[tuple[str, EditFn]] = [(name, keep(name)) for kind in ("resid", "attn", "mlp") for name in names[kind]]
    projections = [(module, keep_input(layer)) for layer, module in enumerate(out_projections(adapter))] if heads \
        else []
    cached: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    with torch.no_grad(), hooks(adapter, edits, role="read"), scoped(projections, role="read", kind="input"):
        if keys_values:
            last, cached = _keys_values(adapter, ids)
        else:
            last = last_logits(adapter, ids)
    return Activations(resid=[store[n] for n in names["resid"]], attn=[store[n] for n in names["attn"]],
                       mlp=[store[n] for n in names["mlp"]],
                       heads=[store[f"heads.{layer}"] for layer in range(adapter.n_layers)] if heads else [],
                       logits=last[0].detach(), keys_values=cached)


@dataclass(frozen=True)
class Cell:
    """One patch: kind, row (layer; resid has a final row n_layers) and column (position; head for heads)."""

    kind: str
    row: int
    column: int


def head_slice(adapter: ModelAdapter, head: int) -> slice:
    return slice(head * adapter.d_head, (head + 1) * adapter.d_head)


def _pieces(adapter: ModelAdapter, acts: Activations, cell: Cell) -> torch.Tensor:
    """The activation a cell replaces, in one run."""
    if cell.kind == "heads":
        return acts.heads[cell.row][:, head_slice(adapter, cell.column)]
    return getattr(acts, cell.kind)[cell.row][cell.column]


def first_difference(clean: Activations, corrupt: Activations) -> int:
    """The first position whose input (the residual entering block 0) differs between the runs: every activation
    before it is the same in both (a position sees only itself and earlier ones), so no patch changes anything there."""
    differs = (clean.resid[0] != corrupt.resid[0]).reshape(clean.resid[0].shape[0], -1).any(-1)
    return int(differs.nonzero()[0, 0]) if bool(differs.any()) else 0


def first_patched(cells: list[Cell], corrupt: Activations, first: int = 0) -> int:
    """The first position a batch of cells changes: where its passes start when the corrupt run's keys and values
    can stand in for the positions before (0 without a cache). A head cell patches every position, of which the
    first that differs is `first` (first_difference)."""
    if corrupt.keys_values is None:
        return 0
    return min(first if cell.kind == "heads" else cell.column for cell in cells)


def _patched_run(adapter: ModelAdapter, ids: torch.Tensor, cells: list[Cell], clean: Activations,
                 corrupt: Activations, first: int = 0) -> torch.Tensor:
    """Logits [len(cells), vocab] of the corrupt prompt, batch row b with cells[b] patched. All cells share their row
    (layer), so every batch row starts at that block: the block before hands on the corrupt residual (with the clean
    row in place for resid cells); the attention, MLP and head cells are patched by hooks on their own batch rows.
    Positions before the first changed one are not run: the corrupt run's keys and values stand in for them (`first`:
    the runs' first differing position)."""
    row, start = cells[0].row, first_patched(cells, corrupt, first)
    batch = ids[:, start:].expand(len(cells), -1)
    by_kind: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for kind in {cell.kind for cell in cells}:
        members = [b for b, cell in enumerate(cells) if cell.kind == kind]
        by_kind[kind] = (torch.tensor(members, device=ids.device),
                         torch.tensor([cells[b].column for b in members], device=ids.device))
    prefix = prefix_cache(adapter, corrupt.keys_values, start, len(cells)) \
        if start > 0 and corrupt.keys_values is not None else {}
    with ExitStack() as stack:
        if row > 0:
            hidden = corrupt.resid[row][start:].expand(len(cells), -1, -1).clone()
            if "resid" in by_kind:
                rows, columns = by_kind.pop("resid")
                hidden[rows, columns - start] = clean.resid[row][columns].to(hidden.dtype)
            stack.enter_context(resume_after(adapter, row - 1, hidden))
        for kind, (rows, columns) in by_kind.items():
            stack.enter_context(_cell_edit(adapter, kind, row, rows, columns, clean, start))
        with torch.no_grad():
            return last_logits(adapter, batch, **prefix)


def _cell_edit(adapter: ModelAdapter, kind: str, row: int, rows: torch.Tensor, columns: torch.Tensor,
               clean: Activations, start: int = 0):
    """The edit hook putting each listed batch row's clean activation in place (resid row 0, attn, mlp, heads); the
    pass runs positions from `start` on."""
    if kind == "heads":
        width = adapter.d_head
        index = columns[:, None] * width + torch.arange(width, device=columns.device)[None]  # [B, d_head]

        def put_heads(tensor: torch.Tensor) -> torch.Tensor:
            out = tensor.clone()
            source = clean.heads[row][start:].to(out.dtype)
            for b, features in zip(rows.tolist(), index, strict=True):
                out[b][:, features] = source[:, features]
            return out
        return scoped([(out_projections(adapter)[row], input_edit(put_heads))], role="edit", kind="input")
    name = point_names(adapter)[kind][row]
    source = getattr(clean, kind)[row]

    def put(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        out[rows, columns - start] = source[columns].to(out.dtype)
        return out
    return hooks(adapter, [(name, put)])


def grid_shape(adapter: ModelAdapter, kind: str, n_tokens: int) -> tuple[int, int]:
    if kind == "resid":
        return adapter.n_layers + 1, n_tokens
    if kind == "heads":
        return adapter.n_layers, adapter.n_heads
    return adapter.n_layers, n_tokens


def changed(adapter: ModelAdapter, kind: str, clean: Activations, corrupt: Activations) -> np.ndarray:
    """Bool [rows, columns]: the cells whose clean and corrupt activations differ (the others patch nothing)."""
    n_rows, n_columns = grid_shape(adapter, kind, int(clean.resid[0].shape[0]))
    return np.array([[not torch.equal(_pieces(adapter, clean, cell), _pieces(adapter, corrupt, cell))
                      for cell in (Cell(kind, row, column) for column in range(n_columns))] for row in range(n_rows)],
                    dtype=bool).reshape(n_rows, n_columns)


PASS_OVERHEAD = 64  # what one more patched pass costs, in batch-row positions run: fitted on SmolLM2 at ~38 with one
# thread (CPU time, 15 blocks), about twice that with two (the same fixed cost, positions run faster); set high, so a
# batch is cut only where that clearly saves work


def plan_batches(cells: list[Cell], start_of: Callable[[Cell], int], n_tokens: int, batch_size: int,
                 overhead: int = PASS_OVERHEAD) -> list[list[Cell]]:
    """Cut one layer's cells (sorted by where their passes may start) into consecutive batches of at most
    batch_size, so that the positions run (each batch row runs from its batch's first start to the end) plus
    `overhead` per pass is least: one batch wastes the positions an early start adds to late cells, many batches
    the fixed cost of a pass. Exact, by dynamic programming over the cut points (the cells are few)."""
    n = len(cells)
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)  # best[j]: least cost of cells[:j]; cut[j]: its last start
    for j in range(1, n + 1):
        for i in range(max(0, j - batch_size), j):
            cost = best[i] + overhead + (j - i) * (n_tokens - start_of(cells[i]))
            if cost < best[j]:
                best[j], cut[j] = cost, i
    batches, j = [], n
    while j > 0:
        batches.append(cells[cut[j]:j])
        j = cut[j]
    return batches[::-1]


@contextmanager
def narrow_unembedding(adapter: ModelAdapter, metric: Metric) -> Iterator[Metric]:
    """Inside the block this run's passes project the last position onto the metric's tokens only (the answer and
    the wrong token), not the whole vocabulary; yields the metric that reads those columns. A probability needs
    every logit, and an unembedding that is not a plain linear map is left alone: then the metric as given."""
    unembedding = adapter.unembedding()
    columns = metric.columns()
    if columns is None or type(unembedding) is not torch.nn.Linear:
        yield metric
        return
    index = torch.tensor(columns, device=unembedding.weight.device)

    def project(hidden: torch.Tensor) -> torch.Tensor:
        bias = None if unembedding.bias is None else unembedding.bias[index]
        return torch.nn.functional.linear(hidden, unembedding.weight[index], bias)

    with override_forward(unembedding, project, role="edit"):
        yield metric.on_columns()


def real_grids(adapter: ModelAdapter, corrupt_ids: torch.Tensor, metric: Metric, clean: Activations,
               corrupt: Activations, kinds: list[str], progress: Progress | None = None,
               batch_size: int = 24) -> dict[str, np.ndarray]:
    """The raw metric of the corrupt run with each cell patched, per kind ([rows, columns], float64). The caller holds
    the model's lock."""
    corrupt_value = float(metric.value(corrupt.logits))
    grids: dict[str, np.ndarray] = {}
    groups: dict[tuple[int, bool], list[Cell]] = {}  # (row, head cells): head cells run from the first difference
    for kind in kinds:
        mask = changed(adapter, kind, clean, corrupt)
        grids[kind] = np.full(mask.shape, corrupt_value)
        for row in range(mask.shape[0]):
            groups.setdefault((row, kind == "heads"), []).extend(
                Cell(kind, row, int(column)) for column in np.flatnonzero(mask[row]))
    first, n_tokens = first_difference(clean, corrupt), int(corrupt_ids.shape[1])
    batches = [batch for _, cells in sorted(groups.items())
               for batch in plan_batches(sorted(cells, key=lambda cell: cell.column),
                                         lambda cell: first_patched([cell], corrupt, first), n_tokens, batch_size)]
    total, done = sum(len(b) for b in batches), 0
    if progress is not None:
        progress(0, total)
    with narrow_unembedding(adapter, metric) as read:
        for cells in batches:
            values = read.value(_patched_run(adapter, corrupt_ids, cells, clean, corrupt, first)).cpu().numpy()
            for cell, value in zip(cells, values, strict=True):
                grids[cell.kind][cell.row, cell.column] = float(value)
            done += len(cells)
            if progress is not None:
                progress(done, total)
    return grids
