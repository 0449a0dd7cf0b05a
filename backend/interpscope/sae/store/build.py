"""One precompute pass over a corpus for an SAE: everything the feature browser shows, written to a store folder.

Pass 1 (the model, resumable): the corpus is cut into windows of `context_size` tokens and run batch by batch up
to the SAE's hook; each batch's nonzero feature activations are saved as one chunk file (written atomically), so
a build that is killed resumes at the first missing chunk and ends with exactly the same chunks.
Pass 2 (numpy only, seconds): per-feature statistics from all chunks, weight-based statistics, the corpus tokens
and vocabulary strings, written into `<store>.partial/final/` and moved file by file into `<store>`, manifest.json
last. Both folders are Interpscope output folders (interpscope.outputs): a folder holding other files is refused
unless force, replacing a store removes only the store's own files, and a partial build resumes only under the
settings it was started with (force: start afresh). The manifest records the sha256 of the SAE's weights file,
which ties the store to the SAE by content (FeatureStore.for_sae).
Position 0 of every window (the attention sink, tens of times the norm of other tokens) and the rare later tokens
with a massive activation (interpscope.sae.sinks) are left out, as in training.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope import atomic
from interpscope.config import InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.outputs import (
    OutputFolder,
    check_output_folder,
    check_own_folder,
    read_marker,
    refuse_foreign_files,
    signed_marker,
)
from interpscope.resume import check_same_settings
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.folder import check_compatible, load_sae
from interpscope.sae.store.cached import cached_batch, find_cache
from interpscope.sae.store.encode import encode_ids
from interpscope.sae.store.features import feature_stats
from interpscope.sae.store.labels import LABELS_FILE, compute_labels
from interpscope.sae.store.layout import (
    FEATURE_STORES,
    MANIFEST,
    STORE_FILES,
    WEIGHTS_HASH,
    StoreSpec,
    default_store_dir,
    folder_of,
    sae_digest,
    save_array_atomic,
    weights_sha256,
)
from interpscope.sae.store.weights import weight_stats
from interpscope.scale.pool import Scale, Shard, batch_shards, map_shards
from interpscope.sinks import zero_sink_features
from interpscope.stores import portable_path
from interpscope.token_text import vocabulary_texts

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

Progress = Callable[[str, int, int], None]
PROGRESS_FILE = "progress.json"


def _chunk_path(partial: Path, index: int) -> Path:
    return partial / f"chunk_{index:05d}.npz"


def _save_chunk(path: Path, tok: np.ndarray, feat: np.ndarray, val: np.ndarray) -> None:
    atomic.write_with(path, lambda handle: np.savez(handle, tok=tok, feat=feat, val=val))


def partial_folder(out: Path) -> Path:
    """Where an unfinished build of the store `out` keeps its chunks."""
    return out.with_name(out.name + ".partial")


def _comparable(spec: dict) -> dict:
    """A spec without what does not change a store's contents (activations from the model or from a cache)."""
    return {k: v for k, v in spec.items() if k != "activations"}


def check_partial(partial: Path, spec: StoreSpec, force: bool) -> bool:
    """No side effects. True: no unfinished build, or one started with the same spec (resume it). False: one whose
    settings differ or are unreadable, to start afresh (force, or unreadable). Otherwise an error naming each
    differing setting. A folder of that name Interpscope did not make (no signed marker) is refused even with force:
    its files are a person's (outputs.check_own_folder)."""
    check_own_folder(partial, "The unfinished build folder")
    if not partial.is_dir():
        return True
    try:
        saved = json.loads((partial / PROGRESS_FILE).read_text(encoding="utf-8"))["spec"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return check_same_settings(_comparable(saved), _comparable(spec.to_dict()),
                               what=f"The unfinished store build in {partial}", where="in the unfinished build",
                               force=force)


def _prepare_partial(partial: Path, spec: StoreSpec, resumable: bool, force: bool) -> OutputFolder:
    """Claim the partial folder, drop what an earlier build with other settings left in it, record the spec."""
    work = OutputFolder.claim(partial, force=force, command="sae store")
    if not resumable:
        work.clear()
    atomic.write_json(partial / PROGRESS_FILE, {"spec": spec.to_dict()})
    work.record(PROGRESS_FILE)
    return work


def _same_contents(built: dict, wanted: dict) -> bool:
    """Specs that describe the same store (whether activations came from the model or a cache does not matter)."""
    ignore = {"activations"}
    return {k: v for k, v in built.items() if k not in ignore} == {k: v for k, v in wanted.items() if k not in ignore}


def store_spec(lm: LoadedModel, sae_folder: str | Path, *, corpus: str | None = None, split: str = "train",
               n_tokens: int = 65536, context_size: int = 128, batch_size: int = 8, **options) -> StoreSpec:
    """The spec of a store for this SAE and corpus (checks that the SAE fits the model)."""
    folder = Path(sae_folder).expanduser().resolve()
    sae = load_sae(folder)
    hook = check_compatible(sae, lm.adapter, None, lm.name)
    if n_tokens < context_size:
        raise InterpscopeError(f"--tokens ({n_tokens}) must be at least one window of {context_size} tokens.")
    if context_size < 2 or batch_size < 1:
        raise InterpscopeError("context_size must be >= 2 and batch_size >= 1.")
    return StoreSpec(sae_path=portable_path(folder), sae_digest=sae_digest(folder), model_name=lm.name,
                     hook_name=hook, d_sae=sae.cfg.d_sae, corpus=str(corpus or "austen"), split=split,
                     n_tokens=int(n_tokens), context_size=int(context_size), batch_size=int(batch_size),
                     **options)


def chunk_arrays(lm: LoadedModel, sae, batch: torch.Tensor, first: int, spec: StoreSpec,
                 cached_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One chunk (the windows first.. of `batch`): its nonzero feature activations as (token index, feature,
    value), position 0 of every window left out."""
    context = spec.context_size
    if cached_rows is None:
        acts = encode_ids(lm, sae, batch, spec.hook_name)
    else:
        x = cached_batch(cached_rows, first, batch.shape[0], context).to(sae.W_enc.dtype)
        with torch.no_grad():
            acts = sae.encode(x)
            zero_sink_features(x, acts)
            acts = acts.float()
    acts[:, 0, :] = 0.0
    seq, pos, feat = torch.nonzero(acts > 0, as_tuple=True)
    val = acts[seq, pos, feat].numpy().astype(np.float32)
    tok = ((seq + first) * context + pos).numpy().astype(np.int64)
    return tok, feat.numpy().astype(np.int32), val


@dataclass
class ChunkJob:
    """What a worker (or this process) computes for one shard of pass 1: the chunks of its windows."""

    sae: SparseAutoencoder
    spec: StoreSpec

    def run(self, lm: LoadedModel, shard: Shard) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        size = self.spec.batch_size
        return [chunk_arrays(lm, self.sae, shard.payload[k:k + size], shard.first + k, self.spec)
                for k in range(0, shard.stop - shard.first, size)]


def run_chunks(lm: LoadedModel, sae, spec: StoreSpec, tokens: torch.Tensor, work: OutputFolder,
               progress: Progress | None = None, stop: Callable[[], bool] | None = None,
               cached_rows: np.ndarray | None = None, scale: Scale | None = None) -> int:
    """Pass 1: write every missing chunk; returns the number of chunks. `stop()` true = stop after this chunk.

    With `cached_rows` (an activation cache covering the windows) the SAE encodes those instead of a model pass,
    in this process. With `scale` the chunks are computed on Ray workers, several per shard, and written here as
    they arrive; a chunk is one batch of windows either way, so the files are the same.
    """
    n_windows = tokens.shape[0]
    n_chunks = -(-n_windows // spec.batch_size)
    context = spec.context_size
    done = sum(_chunk_path(work.path, index).is_file() for index in range(n_chunks))
    if done and progress:
        progress("activations", min(done * spec.batch_size, n_windows) * context, tokens.numel())

    def written(first: int, stop: int) -> bool:
        return _chunk_path(work.path, first // spec.batch_size).is_file()

    if cached_rows is not None:
        scale = None  # no model pass to spread: the SAE encodes the cached rows here
    shards = [Shard(i, first, stop, tokens[first:stop]) for i, (first, stop) in
              enumerate(batch_shards(n_windows, spec.batch_size, scale, written))]

    def save(shard: Shard, chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        nonlocal done
        for k, (tok, feat, val) in enumerate(chunks):
            path = _chunk_path(work.path, shard.first // spec.batch_size + k)
            _save_chunk(path, tok, feat, val)
            work.record(path)
            done += 1
            if progress:
                progress("activations", min(done * spec.batch_size, n_windows) * context, tokens.numel())
        if stop is not None and stop():
            raise InterpscopeError("Store build stopped; run it again to resume where it stopped.")

    if cached_rows is None:
        map_shards(ChunkJob(sae, spec), shards, save, lm=lm, scale=scale)
    else:
        for shard in shards:
            save(shard, [chunk_arrays(lm, sae, shard.payload, shard.first, spec, cached_rows)])
    return n_chunks


def _load_chunks(partial: Path, n_chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {"tok": [], "feat": [], "val": []}
    for index in range(n_chunks):
        with np.load(_chunk_path(partial, index)) as chunk:
            for name in parts:
                parts[name].append(chunk[name])
    return np.concatenate(parts["tok"]), np.concatenate(parts["feat"]), np.concatenate(parts["val"])


def vocabulary(tokenizer, size: int) -> list[str]:
    """Every token id's text (what the browser prints for it)."""
    return vocabulary_texts(tokenizer, size)


def build_store(lm: LoadedModel, sae_folder: str | Path, out: str | Path | None = None, *, corpus: str | None = None,
                split: str = "train", n_tokens: int = 65536, context_size: int = 128, batch_size: int = 8,
                eval_tokens: int = 0, force: bool = False, progress: Progress | None = None,
                stop: Callable[[], bool] | None = None, use_cache: bool = False, scale: Scale | None = None,
                **options) -> Path:
    """Build (or resume, or return the existing) store for the SAE folder over the corpus; returns its folder.

    force: replace a store built with other settings (only its own files), write into a folder holding other
    files (they are kept), and start afresh when an unfinished build was started with other settings.
    use_cache: take the hook activations from a matching SAE-training activation cache when one covers the
    corpus windows (interpscope.sae.store.cached), instead of running the model.
    scale: run pass 1 on Ray workers (interpscope.scale); the store is byte for byte the one a single process builds
    (the overview's few evaluation tokens run here).
    """
    spec = store_spec(lm, sae_folder, corpus=corpus, split=split, n_tokens=n_tokens, context_size=context_size,
                      batch_size=batch_size, **options)
    sae_dir = folder_of(spec.sae_path)
    weights_hash = weights_sha256(sae_dir)
    out = Path(out).expanduser() if out else default_store_dir(sae_dir)
    if (out / MANIFEST).is_file():
        from interpscope.sae.store.store import read_manifest

        if _same_contents(read_manifest(out).get("spec") or {}, spec.to_dict()):
            _drop_partial(partial_folder(out))  # what a build killed after it installed the store left behind
            return out
        if not force:
            raise InterpscopeError(f"{out} already holds a store built with other settings; pass force (--force) "
                                   "to replace it or choose another --out.")
    else:
        check_output_folder(out, force)
        refuse_foreign_files(out, STORE_FILES)  # a person's labels.json there is not replaced by the store's
    partial = partial_folder(out)
    resumable = check_partial(partial, spec, force)
    tokens = token_chunks(lm.tokenizer, context_size, n_tokens, source=corpus, split=split)
    cached_rows = None
    if use_cache:
        cached_rows = find_cache(lm, spec.hook_name, spec.corpus, split, context_size, tokens.shape[0], tokens[0])
        spec.activations = "cache" if cached_rows is not None else "model"
    sae = load_sae(sae_dir)
    work = _prepare_partial(partial, spec, resumable, force)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = now - clock
        clock = now

    n_chunks = run_chunks(lm, sae, spec, tokens, work, progress, stop, cached_rows, scale)
    lap("activations")
    tok, feat, val = _load_chunks(partial, n_chunks)
    work.remove("final")
    final = work.mkdir("final")
    arrays = feature_stats(spec, tok, feat, val, tokens.shape[0],
                           progress=(lambda d, t: progress("features", d, t)) if progress else None)
    lap("features")
    weights = weight_stats(sae, lm.adapter, spec.n_logits, spec.n_neighbours, spec.hist_bins)
    arrays.update(weights.__dict__)
    arrays["tokens"] = tokens.numpy().astype(np.int32)
    for name, array in arrays.items():
        save_array_atomic(final / f"{name}.npy", array)
    vocab = vocabulary(lm.tokenizer, lm.adapter.vocab_size)
    atomic.write_json(final / "vocab.json", vocab)
    atomic.write_json(final / LABELS_FILE, compute_labels(arrays, vocab))
    work.record(*sorted(final.iterdir()))
    lap("weights_and_files")
    metrics = {}
    if eval_tokens > 0:
        from interpscope.sae.transcoder_eval import evaluate_any

        metrics = evaluate_any(lm, sae, n_tokens=eval_tokens, context_size=min(context_size, eval_tokens)).summary()
        lap("evaluation")
    seconds["total"] = sum(seconds.values())
    n_counted = tokens.shape[0] * (context_size - 1)
    manifest = FEATURE_STORES.new_manifest(**{
        "spec": spec.to_dict(), WEIGHTS_HASH: weights_hash, "n_seqs": int(tokens.shape[0]),
        "n_counted_tokens": int(n_counted), "n_nonzero": int(val.size), "sae_cfg": sae.cfg.to_dict(),
        "metrics": metrics, "build_seconds": seconds, "excluded_positions": [0]})
    _install(final, out, manifest, force)
    work.remove_all()
    return out


def _drop_partial(partial: Path) -> None:
    """Remove an unfinished build folder Interpscope made (signed marker): only the files it recorded, and the
    folder once empty; anything else there, or a folder it did not make, stays."""
    marker = read_marker(partial) if partial.is_dir() and not partial.is_symlink() else None
    if marker is not None and signed_marker(marker):
        OutputFolder(partial, marker).remove_all()


def _install(final: Path, out: Path, manifest: dict, force: bool) -> None:
    """Move the finished files into the store folder, replacing only a previous store's own files; the manifest
    goes last (it marks the store complete), so a reader never sees a mix of two stores as a complete one."""
    store = OutputFolder.claim(out, force=True if (out / MANIFEST).is_file() else force, command="sae store")
    (out / MANIFEST).unlink(missing_ok=True)
    moved = [name for name in STORE_FILES if name != MANIFEST and (final / name).is_file()]
    store.record(*moved)  # before they move in: a kill part-way leaves no store file of ours unlisted
    for name in moved:
        atomic.replace(final / name, out / name)
    for name in STORE_FILES:  # a previous store's own files the new one does not have (e.g. its explanations)
        if name != MANIFEST and name not in moved and store.owns(out / name):
            store.remove(out / name)
    FEATURE_STORES.write_manifest(out, manifest)
    store.record(MANIFEST)
