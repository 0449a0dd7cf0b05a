"""Building an entropy-neuron store (the format and its reader: interpscope.entropy_neurons.page_store).

`interpscope neurons store --model M --out DIR` calls build_neuron_store: per layer the candidates' weight statistics
and the corpus side (means, histograms, top contexts) the Entropy neurons page shows on open. The build runs the
analyses (cards, postnorm, unigram, weights) that read stores through page_store, so it lives here, above them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from interpscope import atomic, corpus
from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.cards import context_windows, kept_histogram
from interpscope.entropy_neurons.page_store import NEURON_STORES, StoreSpec, _load_layer
from interpscope.entropy_neurons.postnorm import typical_scale
from interpscope.entropy_neurons.store import corpus_activations, model_key
from interpscope.entropy_neurons.unigram import token_counts, tokenizer_key, unigram_direction
from interpscope.entropy_neurons.weights import check_layer, default_k, neuron_stats
from interpscope.scale.pool import Scale
from interpscope.stores import save_npy, save_npz

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

StoreProgress = Callable[[int, int], None]
DEFAULT_SPEC = StoreSpec()  # frozen: the bundled corpus sample and settings


def layer_arrays(lm: LoadedModel, layer: int, acts: np.ndarray, excluded: np.ndarray, tokens: np.ndarray,
                 spec: StoreSpec,
                 unigram) -> dict[str, np.ndarray]:
    """One layer's arrays from its corpus activations [N, T, d_mlp], excluded mask [N, T] and token ids [N, T]."""
    post_scale = typical_scale(lm.adapter, layer, acts, excluded)
    stats = neuron_stats(lm.adapter, layer, default_k(lm.adapter.d_model), unigram, post_scale=post_scale)
    d_mlp = acts.shape[-1]
    kept = acts.reshape(-1, d_mlp)[~excluded.reshape(-1)]
    width = spec.left + 1 + spec.right
    ids = np.full((d_mlp, spec.top_contexts, width), -1, dtype=np.int32)
    where = np.full((d_mlp, spec.top_contexts, 2), -1, dtype=np.int32)
    values = np.full((d_mlp, spec.top_contexts), np.nan, dtype=np.float32)
    counts = np.zeros((d_mlp, spec.bins), dtype=np.int32)
    edges = np.zeros((d_mlp, spec.bins + 1), dtype=np.float32)
    for neuron in range(d_mlp):
        column = acts[..., neuron]
        counts[neuron], edges[neuron] = kept_histogram(column, excluded, spec.bins)
        for slot, (row, col, lo, hi) in enumerate(context_windows(column, excluded, spec.top_contexts,
                                                                  spec.left, spec.right)):
            start = spec.left - (col - lo)
            ids[neuron, slot, start:start + hi - lo] = tokens[row, lo:hi]
            where[neuron, slot] = (row, col)
            values[neuron, slot] = column[row, col]
    sinks = np.argwhere(excluded[:, 1:]) + np.array([0, 1])
    arrays = {"norm": stats.norm, "logit_var": stats.logit_var, "rho": stats.rho, "k": np.array(stats.k),
              "mean": kept.astype(np.float64).mean(0), "std": kept.astype(np.float64).std(0),
              "min": kept.min(0), "max": kept.max(0), "fire_fraction": (kept > 0).mean(0),
              "hist_counts": counts, "hist_edges": edges, "context_ids": ids, "context_where": where,
              "context_values": values, "excluded_tokens": np.array(int(excluded.sum())),
              "n_tokens": np.array(int(excluded.size)), "sink_positions": sinks.astype(np.int32)}
    if stats.unigram_cosine is not None:
        arrays["unigram_cosine"] = stats.unigram_cosine
    if post_scale is not None:
        arrays["post_norm_scale"] = np.array(post_scale)
    return arrays


def _stale(lm: LoadedModel, folder: Path, layer: int) -> bool:
    """A layer file written before neuron writes went through the MLP's output norm (rebuilt, not kept)."""
    if lm.adapter.mlp_output_norm(layer) is None:
        return False
    path = folder / f"layer{layer}.npz"
    if not path.is_file():
        return True
    with np.load(path) as data:
        return "post_norm_scale" not in data.files


def build_neuron_store(lm: LoadedModel, out: str | Path, layers: list[int] | None = None,
                       spec: StoreSpec = DEFAULT_SPEC, batch_size: int = 8, progress: StoreProgress | None = None,
                       scale: Scale | None = None) -> Path:
    """Build (or finish) the store of `layers` (default: the final layer) in `out`; layers already there with the
    same model and spec are kept. progress(done, total) counts layers. The model pass over the corpus runs as
    shards of windows (on Ray workers with `scale`), each kept in `layer{L}.shards/` until the layer is written,
    so a stopped build resumes mid-layer; the statistics come from the joined activations here, so the files are
    the same either way."""
    folder = Path(out).expanduser()
    manifest = NEURON_STORES.owned(folder)
    atomic.remove_stale_temps(folder)  # what a killed build left mid-write
    key = model_key(lm)
    requested: list[int | None] = list(layers) if layers else [None]  # None: the final layer
    wanted = sorted({check_layer(lm.adapter, layer) for layer in requested})
    if manifest is not None and (manifest.get("model_key") != key or manifest.get("spec") != spec.__dict__):
        raise InterpscopeError(f"{folder} holds a store of another model or other settings; choose another folder.")
    folder.mkdir(parents=True, exist_ok=True)
    manifest = manifest or NEURON_STORES.new_manifest(model=lm.name, model_key=key, spec=spec.__dict__,
                                                      tokenizer_key=tokenizer_key(lm.tokenizer), layers={},
                                                      build_seconds={})
    NEURON_STORES.write_manifest(folder, manifest)
    missing = [layer for layer in wanted if str(layer) not in manifest["layers"] or _stale(lm, folder, layer)]
    source, split = spec.source.rsplit("-", 1)
    counts = token_counts(lm.tokenizer, lm.adapter.vocab_size, source=None if source == "austen" else source,
                          split=split)
    save_npy(folder / "unigram_counts.npy", counts)
    unigram = unigram_direction(counts)
    tokens = corpus.token_chunks(lm.tokenizer, spec.seq_len, spec.n_tokens, split=split,
                                 source=None if source == "austen" else source)
    for done, layer in enumerate(missing):
        started = time.perf_counter()
        acts, excluded = corpus_activations(lm, tokens, [layer], folder / f"layer{layer}.shards",
                                            batch_size=batch_size, scale=scale)
        arrays = layer_arrays(lm, layer, acts[layer], excluded[layer], tokens.numpy(), spec, unigram)
        save_npz(folder / f"layer{layer}.npz", arrays)
        manifest["layers"][str(layer)] = f"layer{layer}.npz"
        manifest["build_seconds"][str(layer)] = round(time.perf_counter() - started, 1)
        NEURON_STORES.write_manifest(folder, manifest)
        if progress:
            progress(done + 1, len(missing))
    _load_layer.cache_clear()
    return folder
