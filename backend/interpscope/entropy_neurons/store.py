"""Corpus activations of MLP neurons, cached on disk: the means used by mean ablation, the histograms and the
top activating contexts of the neuron detail view all come from one store per (model, corpus sample, layer).

Stores live under data_dir()/neurons/acts/<model key>/<sample>/ as .npy files (float16 activations,
int32 token ids, bool excluded positions, float64 means), written atomically and opened memory-mapped.
Position 0 of every window and massive-activation rows (interpscope.sinks) are marked excluded: means, histograms
and rankings leave them out (v2 of the layout; v1 stores averaged them in and are not reused).
The model pass runs as shards of whole batches of windows (interpscope.scale), in this process or on Ray workers, each
finished shard saved at once so an interrupted pass resumes; the joined arrays are the same bytes either way.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope import corpus
from interpscope.capture import StopForward, hooks, model_lock
from interpscope.config import InterpscopeError, data_dir
from interpscope.entropy_neurons.unigram import source_key
from interpscope.entropy_neurons.weights import check_layer
from interpscope.models.identity import model_key
from interpscope.scale.pool import Scale, Shard, batch_shards, map_shards
from interpscope.scale.shards import ShardFiles, covered
from interpscope.sinks import detection_point, excluded_mask
from interpscope.stores import save_npy

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

Progress = Callable[[float, str], None]
DEFAULT_STORE_TOKENS = 8192
DEFAULT_SEQ_LEN = 128
LAYOUT = "v2"


@dataclass
class ActivationStore:
    """Activations of every neuron of one layer over a corpus sample: activations [N, T, d_mlp] (float16,
    memory-mapped), tokens [N, T] (int32), excluded [N, T] (bool: position 0 and massive-activation rows) and the
    mean activation per neuron over the positions not excluded [d_mlp] (float64)."""

    layer: int
    activations: np.ndarray
    tokens: np.ndarray
    mean: np.ndarray
    excluded: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.size)

    def sink_positions(self) -> list[tuple[int, int]]:
        """(window, position) of the massive-activation rows past position 0 (position 0 is always excluded)."""
        rows, cols = np.nonzero(np.asarray(self.excluded)[:, 1:])
        return [(int(r), int(c) + 1) for r, c in zip(rows, cols, strict=True)]



def _sample_dir(lm: LoadedModel, n_tokens: int, seq_len: int, source, split: str) -> Path:
    sample = f"{source_key(source, split)}-{seq_len}x{n_tokens}-{LAYOUT}"
    return data_dir() / "neurons" / "acts" / model_key(lm) / sample


def run_layers(lm: LoadedModel, token_batches: torch.Tensor, layers: list[int], batch_size: int = 8,
               progress: Progress | None = None) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Neuron activations [N, T, d_mlp] (float32) of `layers` on token windows [N, T], and each layer's excluded
    positions [N, T] (bool; interpscope.sinks at the layer's detection point), stopping each forward pass after the last
    of those layers."""
    adapter = lm.adapter
    layers = sorted(set(layers))
    outputs: dict[int, list[np.ndarray]] = {layer: [] for layer in layers}
    points = {layer: detection_point(adapter, layer) for layer in layers}
    masks: dict[str, list[np.ndarray]] = {point: [] for point in set(points.values())}
    last = layers[-1]

    def reader(layer: int):
        def read(tensor: torch.Tensor) -> None:
            outputs[layer].append(tensor.detach().float().cpu().numpy())
            if layer == last:
                raise StopForward
        return read

    def sinks(point: str):
        def read(tensor: torch.Tensor) -> None:
            masks[point].append(excluded_mask(tensor.detach()).cpu().numpy())
        return read

    readers = [(point, sinks(point)) for point in masks] + [(f"blocks.{layer}.mlp.hook_post", reader(layer))
                                                            for layer in layers]
    n = token_batches.shape[0]
    with model_lock(lm), torch.no_grad(), hooks(adapter, readers, role="read"):
        for start in range(0, n, batch_size):
            batch = token_batches[start:start + batch_size].to(lm.device)
            try:
                lm.model(input_ids=batch, use_cache=False)
            except StopForward:
                pass
            if progress:
                progress(min(1.0, (start + batch.shape[0]) / n), f"corpus activations {start + batch.shape[0]}/{n}")
    activations = {layer: np.concatenate(chunks, 0) for layer, chunks in outputs.items()}
    return activations, {layer: np.concatenate(masks[points[layer]], 0) for layer in layers}


@dataclass
class NeuronJob:
    """What a worker (or this process) computes for one shard of windows: run_layers on them."""

    layers: list[int]
    batch_size: int

    def run(self, lm: LoadedModel, shard: Shard) -> dict[str, np.ndarray]:
        acts, excluded = run_layers(lm, shard.payload, self.layers, batch_size=self.batch_size)
        return {**{f"acts{layer}": a for layer, a in acts.items()},
                **{f"excluded{layer}": e for layer, e in excluded.items()}}


def corpus_activations(lm: LoadedModel, tokens: torch.Tensor, layers: list[int], shard_dir: Path, batch_size: int = 8,
                       progress: Progress | None = None,
                       scale: Scale | None = None) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """run_layers over token windows [N, T] as shards of whole batches, here or on Ray workers (`scale`). Each
    finished shard is saved in shard_dir at once (a rerun after a stop skips it); the arrays returned are the
    shards joined in order, byte for byte what run_layers returns. shard_dir is removed once they are joined."""
    files = ShardFiles(shard_dir)
    done = files.intervals()
    n = tokens.shape[0]
    shards = [Shard(i, first, stop, tokens[first:stop]) for i, (first, stop) in
              enumerate(batch_shards(n, batch_size, scale, lambda a, b: covered(done, a, b)))]
    finished = sum(b - a for a, b in done)

    def save(shard: Shard, arrays: dict[str, np.ndarray]) -> None:
        nonlocal finished
        files.save(shard.first, shard.stop, arrays)
        finished += shard.stop - shard.first
        if progress:
            progress(min(1.0, finished / n), f"corpus activations {finished}/{n}")

    map_shards(NeuronJob(sorted(set(layers)), batch_size), shards, save, lm=lm, scale=scale)
    parts = files.load_all()
    joined = {name: np.concatenate([part[name] for part in parts], 0) for name in parts[0]}
    files.remove()
    return ({layer: joined[f"acts{layer}"] for layer in layers},
            {layer: joined[f"excluded{layer}"] for layer in layers})


def kept_mean(activations: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """Mean activation per neuron [d_mlp] (float64) over the positions not excluded."""
    flat = np.asarray(activations).reshape(-1, activations.shape[-1])
    return flat[~np.asarray(excluded, dtype=bool).reshape(-1)].astype(np.float64).mean(0)


def activation_stores(lm: LoadedModel, layers: list[int], n_tokens: int = DEFAULT_STORE_TOKENS,
                      seq_len: int = DEFAULT_SEQ_LEN,
                      source=None, split: str = "train", progress: Progress | None = None,
                      scale: Scale | None = None) -> dict[int, ActivationStore]:
    """One ActivationStore per layer, read from the cache or computed in a single pass for the missing ones (as
    shards of windows, on Ray workers with `scale`: the same files either way)."""
    if n_tokens < seq_len:
        raise InterpscopeError(f"Need at least {seq_len} corpus tokens for the activation store; got {n_tokens}.")
    layers = sorted({check_layer(lm.adapter, layer) for layer in layers})
    folder = _sample_dir(lm, n_tokens, seq_len, source, split)
    token_path = folder / "tokens.npy"
    missing = [layer for layer in layers if not (folder / f"layer{layer}.npy").is_file()]
    if missing:
        tokens = corpus.token_chunks(lm.tokenizer, seq_len, n_tokens, source=source, split=split)
        shard_dir = folder / ("shards-layers-" + "_".join(map(str, missing)))
        computed, excluded = corpus_activations(lm, tokens, missing, shard_dir, progress=progress, scale=scale)
        folder.mkdir(parents=True, exist_ok=True)
        save_npy(token_path, tokens.numpy().astype(np.int32))
        for layer, acts in computed.items():
            save_npy(folder / f"excluded{layer}.npy", excluded[layer])
            save_npy(folder / f"mean{layer}.npy", kept_mean(acts, excluded[layer]))
            save_npy(folder / f"layer{layer}.npy", acts.astype(np.float16))
    tokens_np = np.load(token_path, mmap_mode="r")
    return {layer: ActivationStore(layer=layer, activations=np.load(folder / f"layer{layer}.npy", mmap_mode="r"),
                                   tokens=tokens_np, mean=np.load(folder / f"mean{layer}.npy"),
                                   excluded=np.load(folder / f"excluded{layer}.npy"))
            for layer in layers}


def store_exists(lm: LoadedModel, layer: int, n_tokens: int = DEFAULT_STORE_TOKENS, seq_len: int = DEFAULT_SEQ_LEN,
                 source=None, split: str = "train") -> bool:
    """Whether the activation store of this layer and corpus sample is already on disk."""
    return (_sample_dir(lm, n_tokens, seq_len, source, split) / f"layer{layer}.npy").is_file()


def mean_activations(lm: LoadedModel, layers: list[int], n_tokens: int = DEFAULT_STORE_TOKENS,
                     seq_len: int = DEFAULT_SEQ_LEN,
                     source=None, split: str = "train", progress: Progress | None = None) -> dict[int, np.ndarray]:
    """Mean activation of every neuron of each layer over the corpus sample [d_mlp] (cached)."""
    stores = activation_stores(lm, layers, n_tokens, seq_len, source, split, progress)
    return {layer: store.mean for layer, store in stores.items()}
