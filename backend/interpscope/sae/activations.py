"""Activations on disk, read back through a shuffled buffer, so several SAEs train from one pass of the model.

A cache is a folder under data_dir()/activations/<key>/ holding a raw row-major array (float16 or float32,
[n_rows, d_in]) read as a numpy memmap. It is written into `acts.partial` shard by shard (whole model batches of
windows, in this process or on Ray workers: interpscope.scale) with a `progress.json` that records the windows
already flushed (so an interrupted build resumes), then renamed to `acts.bin` and described by `meta.json`
(written via a temporary file and os.replace): a folder with meta.json is complete by construction.

The first position of every context is left out: it is the attention sink, whose norm is tens of times larger
than any other token's and would dominate the reconstruction loss.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope import atomic
from interpscope.capture import StopForward, hooks, model_lock
from interpscope.config import DATA_DIR_ENV, InterpscopeError, data_dir
from interpscope.corpus import token_chunks
from interpscope.scale.pool import Scale, Shard, batch_shards, map_shards
from interpscope.scale.shards import covered, merge_intervals
from interpscope.scale.transfer import to_device, to_host
from interpscope.sinks import sink_rows

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

Progress = Callable[[int, int], None]
NP_DTYPES = {"float16": np.float16, "float32": np.float32}
TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}
PAIR = "->"  # a transcoder's paired cache: 'input hook->target hook'


@dataclass
class CacheSpec:
    """Everything that determines a cache's contents (its hash names the folder)."""

    model_name: str
    hook_name: str
    d_in: int
    n_tokens: int
    source: str = "austen"
    split: str = "train"
    context_size: int = 128
    dtype: str = "float16"

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:16]



class ActivationCache:
    """A complete cache folder: `array` is a read-only memmap [n_rows, d_in]."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        meta_file = self.folder / "meta.json"
        if not meta_file.is_file():
            raise InterpscopeError(f"{self.folder} is not a complete activation cache (no meta.json).")
        self.meta = json.loads(meta_file.read_text(encoding="utf-8"))
        self.spec = CacheSpec(**self.meta["spec"])
        self.n_rows = int(self.meta["n_rows"])
        self.array = np.memmap(self.folder / "acts.bin", dtype=NP_DTYPES[self.spec.dtype], mode="r",
                               shape=(self.n_rows, self.spec.d_in))

    @property
    def d_in(self) -> int:
        return self.spec.d_in

    def mean_squared_norm(self, sample_rows: int = 65536, seed: int = 0) -> float:
        """E||x||^2 over a random sample of rows, outliers left out (used to scale inputs to E||x||^2 = d_in)."""
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(self.n_rows, size=min(sample_rows, self.n_rows), replace=False))
        x = torch.from_numpy(np.asarray(self.array[rows], dtype=np.float32))
        return float(x[~sink_rows(x)].pow(2).sum(-1).mean())  # massive activations left out


def cache_folder(spec: CacheSpec) -> Path:
    return data_dir() / "activations" / spec.key()


@dataclass
class CacheJob:
    """What a worker (or this process) computes for one shard of a cache: the rows of its windows."""

    hook_name: str
    dtype: str
    batch_size: int

    def run(self, lm: LoadedModel, shard: Shard) -> np.ndarray:
        return window_rows(lm, self.hook_name, shard.payload, self.batch_size, self.dtype)


def paired_hooks(hook_name: str) -> list[str]:
    """The hooks a cache reads: one, or a transcoder's 'input->target' pair (rows hold both side by side)."""
    return [part.strip() for part in hook_name.split(PAIR)]


def window_rows(lm: LoadedModel, hook_name: str, windows: torch.Tensor, batch_size: int, dtype: str) -> np.ndarray:
    """Activations at hook_name of token windows [N, T], positions 1.. of each, as rows [N * (T - 1), d] of dtype
    (a pair 'a->b': [x_a | x_b], d = 2 d_model); the windows run batch_size at a time (the batches, hence the
    bits, of a single-process build)."""
    adapter = lm.adapter
    names = paired_hooks(hook_name)
    last = names[-1]
    stop_early = adapter.resolve(last).kind == "post" and last.startswith("blocks.")
    captured: dict[str, torch.Tensor] = {}

    def grabber(name: str):
        def grab(tensor: torch.Tensor):
            captured[name] = tensor.detach()
            if stop_early and name == last and all(n in captured for n in names):
                raise StopForward
            return None
        return grab

    copies = []
    with model_lock(lm), torch.no_grad():
        for first in range(0, windows.shape[0], batch_size):
            batch = windows[first:first + batch_size].to(lm.device)
            try:
                with hooks(adapter, {name: grabber(name) for name in names}):
                    lm.model(input_ids=batch, use_cache=False)
            except StopForward:
                pass
            acts = torch.cat([captured.pop(name)[:, 1:, :] for name in names], -1)
            acts = acts.reshape(-1, adapter.d_model * len(names))
            copies.append(to_host(acts, TORCH_DTYPES[dtype]))
    return np.concatenate([copy.numpy().astype(NP_DTYPES[dtype], copy=False) for copy in copies])


def _windows_done(progress_file: Path, spec: CacheSpec, n_rows: int, rows_per_chunk: int) -> list[list[int]]:
    """[first, stop) window ranges an interrupted build of this spec already wrote (older builds recorded a
    prefix of rows)."""
    saved = json.loads(progress_file.read_text(encoding="utf-8"))
    if saved.get("spec") != asdict(spec) or saved.get("n_rows") != n_rows:
        return []
    if "windows_done" in saved:
        return merge_intervals([list(r) for r in saved["windows_done"]])
    prefix = int(saved.get("rows_done", 0)) // rows_per_chunk
    return [[0, prefix]] if prefix else []


def refuse_without_room(partial: Path, size: int) -> None:
    """One line, before any work, when the cache file `partial` cannot grow to `size` bytes on its disk (what a
    resumed build already holds there counts)."""
    held = partial.stat().st_blocks * 512 if partial.is_file() else 0
    existing = next((p for p in (partial.parent, *partial.parent.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(existing).free
    if size - held > free:
        more = f" ({(size - held) / 2**30:,.2f} GiB more than it holds)" if held else ""
        raise InterpscopeError(
            f"The activation cache needs {size / 2**30:,.2f} GiB in {partial.parent}{more} and only "
            f"{free / 2**30:,.2f} GiB is free there; free some space, point {DATA_DIR_ENV} at a larger disk, or "
            "lower --cache-tokens.")


def check_cache_space(lm: LoadedModel, hook_name: str, n_tokens: int, *, source: str | None = None,
                      split: str = "train", context_size: int = 128, dtype: str = "float16") -> None:
    """Before an output folder is claimed or the model runs: refuse a cache the data directory has no room for (at
    most n_tokens // context_size windows), unless a complete one of these settings is there already. No side
    effects beyond the data directory itself."""
    names = paired_hooks(hook_name)
    d_in = lm.adapter.d_model * len(names)
    spec = CacheSpec(model_name=lm.name, hook_name=hook_name, d_in=d_in, n_tokens=int(n_tokens),
                     source=str(source or "austen"), split=split, context_size=int(context_size), dtype=dtype)
    folder = cache_folder(spec)
    if (folder / "meta.json").is_file() or dtype not in NP_DTYPES:
        return
    rows = (int(n_tokens) // int(context_size)) * (int(context_size) - 1)
    refuse_without_room(folder / "acts.partial", rows * d_in * np.dtype(NP_DTYPES[dtype]).itemsize)


def reserve_space(path: Path, size: int, fresh: bool) -> None:
    """Before any model pass: make `path` a file of `size` bytes with its blocks allocated (posix_fallocate), or
    refuse in one line with what is needed and what is free. A cache that does not fit used to run for minutes and
    then die with a bus error (rc 135, no message) when a write through its memory map found the disk full. fresh:
    start the file over (nothing of an earlier build is kept)."""
    if fresh:
        path.unlink(missing_ok=True)
    refuse_without_room(path, size)
    try:
        with open(path, "r+b" if path.is_file() else "wb") as handle:
            try:
                os.posix_fallocate(handle.fileno(), 0, size)
            except (AttributeError, OSError) as err:  # no fallocate here (macOS, some file systems): the size only
                if isinstance(err, OSError) and err.errno in atomic.FULL_DISK:
                    raise
                if os.fstat(handle.fileno()).st_size < size:
                    handle.truncate(size)
    except OSError as err:
        raise atomic.write_error(err, path) from None


def build_activation_cache(lm: LoadedModel, hook_name: str, n_tokens: int, *, source: str | None = None,
                           split: str = "train", context_size: int = 128, batch_size: int = 8,
                           dtype: str = "float16", progress: Progress | None = None,
                           folder: Path | None = None, scale: Scale | None = None) -> ActivationCache:
    """Run the model over ~n_tokens corpus tokens and store the activations at hook_name; resumes if interrupted.

    Returns the existing cache at once when an identical one is complete. The windows are cut into shards of
    whole batches (interpscope.scale): run here in order, or on Ray workers with `scale`; each finished shard is
    written into acts.partial and recorded in progress.json at once, so a rerun skips it, and the bytes are the
    same either way.
    """
    if dtype not in NP_DTYPES:
        raise InterpscopeError(f"Activation cache dtype must be float16 or float32, not {dtype!r}.")
    adapter = lm.adapter
    names = paired_hooks(hook_name)
    if not 1 <= len(names) <= 2 or any(name.endswith("mlp.hook_post") for name in names):
        raise InterpscopeError(f"Cannot cache {hook_name!r}: give one hook, or 'input->target' for a transcoder "
                               "(residual-stream or block-output hooks, not mlp.hook_post).")
    for name in names:
        adapter.resolve(name)  # validates the name for this model
    d_in = adapter.d_model * len(names)
    spec = CacheSpec(model_name=lm.name, hook_name=hook_name, d_in=d_in, n_tokens=int(n_tokens),
                     source=str(source or "austen"), split=split, context_size=int(context_size), dtype=dtype)
    folder = Path(folder) if folder else cache_folder(spec)
    if (folder / "meta.json").is_file():
        return ActivationCache(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chunks = token_chunks(lm.tokenizer, context_size, n_tokens, source=source, split=split)
    rows_per_chunk = context_size - 1
    n_rows = chunks.shape[0] * rows_per_chunk
    partial = folder / "acts.partial"
    progress_file = folder / "progress.json"
    done: list[list[int]] = []
    if partial.is_file() and progress_file.is_file():
        done = _windows_done(progress_file, spec, n_rows, rows_per_chunk)
    shards = [Shard(i, first, stop, chunks[first:stop]) for i, (first, stop) in
              enumerate(batch_shards(chunks.shape[0], batch_size, scale, lambda a, b: covered(done, a, b)))]

    row_bytes = d_in * np.dtype(NP_DTYPES[dtype]).itemsize
    reserve_space(partial, n_rows * row_bytes, fresh=not done)

    def fill() -> None:
        """Write every shard into acts.partial with plain writes at its offset: a full disk is then an OSError and
        one clear line (through a memory map it was a bus error, rc 135, and no message). The file is closed when
        this returns, before the rename."""
        with open(partial, "r+b") as handle:
            def write(shard: Shard, rows: np.ndarray) -> None:
                nonlocal done
                data = memoryview(np.ascontiguousarray(rows, dtype=NP_DTYPES[dtype]).tobytes())
                offset = shard.first * rows_per_chunk * row_bytes
                try:
                    while len(data):  # a write may stop short (then the next one reports why)
                        written = os.pwrite(handle.fileno(), data, offset)
                        data, offset = data[written:], offset + written
                    os.fsync(handle.fileno())
                except OSError as err:
                    raise atomic.write_error(err, partial) from None
                done = merge_intervals(done + [[shard.first, shard.stop]])
                prefix = done[0][1] if done[0][0] == 0 else 0
                atomic.write_json(progress_file, {"spec": asdict(spec), "n_rows": n_rows, "windows_done": done,
                                                 "rows_done": prefix * rows_per_chunk})
                if progress:
                    progress(sum(b - a for a, b in done) * rows_per_chunk, n_rows)

            map_shards(CacheJob(hook_name, dtype, batch_size), shards, write, lm=lm, scale=scale)

    fill()
    atomic.replace(partial, folder / "acts.bin")
    atomic.write_json(folder / "meta.json", {"spec": asdict(spec), "n_rows": n_rows,
                                            "excluded_positions": [0]})
    progress_file.unlink(missing_ok=True)
    return ActivationCache(folder)


class ShuffledBuffer:
    """Endless shuffled batches from a cache: blocks of rows in random order, mixed within a buffer of blocks.

    The order is a pure function of `seed`, so `skip(n)` (used when resuming) lands on the same batches without
    reading the skipped data. With a CUDA `device` each fill goes to the GPU once (pinned memory, non_blocking)
    and batches are cut there. Rows with norm above `max_norm` (after scaling) are dropped: a rare token that acts
    as an attention sink mid-text has a norm ~100x the typical one, and one such row can wreck a training step.
    """

    def __init__(self, cache: ActivationCache, batch_size: int, *, buffer_rows: int = 131072,
                 block_rows: int = 2048, seed: int = 0, scale: float = 1.0, max_norm: float | None = None,
                 device: torch.device | str = "cpu"):
        if batch_size < 1:
            raise InterpscopeError("batch_size must be positive.")
        self.cache = cache
        self.batch_size = batch_size
        self.block_rows = min(block_rows, cache.n_rows)
        self.n_blocks = max(1, cache.n_rows // self.block_rows)
        self.blocks_per_fill = max(1, min(self.n_blocks, buffer_rows // self.block_rows))
        self.seed = seed
        self.scale = scale
        self.max_norm = max_norm
        self.device = torch.device(device)
        self.batches_served = 0
        self.rows_dropped = 0

    def _fills(self) -> Iterator[tuple[int, np.ndarray]]:
        epoch = 0
        while True:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(self.n_blocks)
            for start in range(0, self.n_blocks, self.blocks_per_fill):
                yield epoch * 1_000_003 + start, order[start:start + self.blocks_per_fill]
            epoch += 1

    def batches(self) -> Iterator[torch.Tensor]:
        """Yield float32 tensors [batch_size, d_in], continuing after the batches already served."""
        skip = self.batches_served
        for fill_id, blocks in self._fills():
            n_rows = len(blocks) * self.block_rows
            n_batches = n_rows // self.batch_size
            if skip >= n_batches:
                skip -= n_batches
                continue
            rows = (np.sort(blocks)[:, None] * self.block_rows + np.arange(self.block_rows)[None, :]).ravel()
            data = to_device(torch.from_numpy(np.asarray(self.cache.array[rows], dtype=np.float32)), self.device)
            if self.scale != 1.0:
                data.mul_(self.scale)
            perm = torch.from_numpy(np.random.default_rng([self.seed, fill_id, 7]).permutation(n_rows))
            perm = perm.to(self.device)
            for b in range(skip, n_batches):
                self.batches_served += 1
                batch = data[perm[b * self.batch_size:(b + 1) * self.batch_size]]
                if self.max_norm is not None:
                    keep = batch.norm(dim=-1) <= self.max_norm
                    if not bool(keep.all()):
                        self.rows_dropped += int((~keep).sum())
                        batch = batch[keep]
                yield batch
            skip = 0

    def skip(self, n_batches: int) -> None:
        self.batches_served += int(n_batches)


def finalize_partial_cache(folder: str | Path) -> ActivationCache:
    """Turn an interrupted cache into a complete, smaller one holding the rows already written.

    For when caching the full request would take too long: meta.json then records the true row count.
    """
    folder = Path(folder)
    if (folder / "meta.json").is_file():
        return ActivationCache(folder)
    progress_file = folder / "progress.json"
    if not progress_file.is_file() or not (folder / "acts.partial").is_file():
        raise InterpscopeError(f"{folder} holds no partial activation cache.")
    saved = json.loads(progress_file.read_text(encoding="utf-8"))
    spec = CacheSpec(**saved["spec"])
    rows = int(saved["rows_done"])
    if rows < 1:
        raise InterpscopeError(f"{folder}: no rows written yet.")
    row_bytes = spec.d_in * np.dtype(NP_DTYPES[spec.dtype]).itemsize
    os.truncate(folder / "acts.partial", rows * row_bytes)
    atomic.replace(folder / "acts.partial", folder / "acts.bin")
    atomic.write_json(folder / "meta.json", {"spec": asdict(spec), "n_rows": rows, "excluded_positions": [0],
                                            "requested_rows": int(saved["n_rows"]), "truncated": True})
    progress_file.unlink(missing_ok=True)
    return ActivationCache(folder)
