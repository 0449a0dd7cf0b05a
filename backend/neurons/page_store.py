"""The entropy-neuron store: everything the Entropy neurons page shows on open, precomputed per model and layer.

Per layer (one `layer{L}.npz`): the candidates' weight statistics (norm, LogitVar, rho at the default k, unigram
cosine; on what each neuron writes into the residual, through the MLP's output norm at its typical scale
`post_norm_scale` where the model has one), and over a corpus sample (8,192 tokens of the bundled corpus's train
split by default): each neuron's mean / std / min / max / firing fraction over the positions not excluded
(position 0 and massive-activation rows, interpscope.sinks), its activation histogram over those positions, and its top
activating contexts with their left context (token ids around the firing token, which is never position 0 of its
window). The folder also keeps the corpus's token counts (the unigram direction) and a manifest naming the model
(content key), the corpus sample and the settings. Built by `interpscope neurons store --model M --out DIR`
(resumable, layer by layer; it writes only into a folder it created or that already holds such a store), shipped in
assets/neuron_stores/<model>/.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from interpscope import atomic, corpus
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.neurons.cards import (
    CONTEXT_LEFT,
    CONTEXT_RIGHT,
    Context,
    NeuronDetail,
    context_windows,
    kept_histogram,
    weight_detail,
)
from interpscope.neurons.postnorm import typical_scale
from interpscope.neurons.store import DEFAULT_SEQ_LEN, DEFAULT_STORE_TOKENS, corpus_activations, model_key
from interpscope.neurons.unigram import source_key, token_counts, tokenizer_key, unigram_direction
from interpscope.neurons.weights import NeuronStats, check_layer, default_k, neuron_stats
from interpscope.scale.pool import Scale
from interpscope.stores import StoreKind, save_npy, save_npz

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

NEURON_STORES = StoreKind(name="entropy-neuron store", shipped=ASSETS_DIR / "neuron_stores",
                          local=("neurons", "stores"), tag="interpscope-neuron-store", indent=1,
                          build_hint="build it with `interpscope neurons store --model M --out DIR`")
TOP_CONTEXTS, BINS = 20, 60
StoreProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class StoreSpec:
    """The corpus sample and settings a store was built with (two stores with equal specs hold equal numbers)."""

    n_tokens: int = DEFAULT_STORE_TOKENS
    seq_len: int = DEFAULT_SEQ_LEN
    source: str = "austen-train"
    top_contexts: int = TOP_CONTEXTS
    left: int = CONTEXT_LEFT
    right: int = CONTEXT_RIGHT
    bins: int = BINS


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


def build_neuron_store(lm: LoadedModel, out: str | Path, layers: list[int] | None = None, spec: StoreSpec = StoreSpec(),
                       batch_size: int = 8, progress: StoreProgress | None = None,
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


@lru_cache(maxsize=16)
def _load_layer(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


class NeuronStore:
    """A finished store folder opened read-only; layers load on first use and stay in memory (a few MB)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest = NEURON_STORES.read_manifest(self.folder)
        self.spec = StoreSpec(**self.manifest["spec"])

    @property
    def layers(self) -> list[int]:
        return sorted(int(layer) for layer in self.manifest["layers"])

    def layer(self, layer: int) -> dict[str, np.ndarray]:
        if str(layer) not in self.manifest["layers"]:
            raise InterpscopeError(f"The store at {self.folder} has no layer {layer} (it has {self.layers}).")
        return _load_layer(str(self.folder / self.manifest["layers"][str(layer)]))

    def stats(self, layer: int) -> NeuronStats:
        data = self.layer(layer)
        return NeuronStats(layer=layer, k=int(data["k"]), norm=data["norm"], logit_var=data["logit_var"],
                           rho=data["rho"], unigram_cosine=data.get("unigram_cosine"),
                           post_scale=self.post_scale(layer))

    def post_scale(self, layer: int) -> float | None:
        """The typical scale of the layer's MLP output norm the statistics were computed at (None: no such norm)."""
        data = self.layer(layer)
        return float(data["post_norm_scale"]) if "post_norm_scale" in data else None

    def current(self, adapter) -> bool:
        """False for a store built before neuron writes went through the MLP's output norm: a layer of a model
        with that norm whose file has no post_norm_scale holds statistics of the wrong direction."""
        return all(adapter.mlp_output_norm(layer) is None or self.post_scale(layer) is not None
                   for layer in self.layers)

    def matches(self, n_tokens: int, seq_len: int, source, split: str) -> bool:
        """Whether the store's corpus sample is the one asked for (so its means stand for a fresh computation)."""
        return (self.spec.n_tokens, self.spec.seq_len, self.spec.source) == (n_tokens, seq_len,
                                                                           source_key(source, split))

    def detail(self, lm: LoadedModel, layer: int, index: int, k: int | None = None,
               top_contexts: int = 10) -> NeuronDetail:
        """The neuron detail card: weights computed live (cheap), corpus side from the store."""
        data = self.layer(layer)
        detail = weight_detail(lm, layer, index, k=k, post_scale=self.post_scale(layer))
        detail.histogram_counts = data["hist_counts"][index].astype(np.int64)
        detail.histogram_edges = data["hist_edges"][index].astype(np.float64)
        detail.mean_activation = float(data["mean"][index])
        contexts = []
        for slot in range(min(top_contexts, self.spec.top_contexts)):
            ids = data["context_ids"][index, slot]
            if ids[self.spec.left] < 0:
                break
            present = ids >= 0
            contexts.append(Context(tokens=[lm.tokenizer.decode([int(i)]) for i in ids[present]],
                                    position=int(present[:self.spec.left].sum()),
                                    activation=float(data["context_values"][index, slot])))
        detail.contexts = contexts
        detail.excluded_tokens = int(data["excluded_tokens"])
        detail.sink_positions = [(int(r), int(c)) for r, c in data["sink_positions"]]
        detail.source = f"precomputed store ({self.spec.n_tokens} corpus tokens)"
        return detail


def find_neuron_store(lm: LoadedModel) -> NeuronStore | None:
    """The store built for this very model (same content key), shipped in assets/ or built into the data dir."""
    for folder, _ in NEURON_STORES.matching(model_key=model_key(lm)):
        store = NeuronStore(folder)
        if store.current(lm.adapter):
            return store
    return None


def shipped_unigram_counts(tokenizer, source, split: str) -> np.ndarray | None:
    """Token counts of a corpus split kept in a store built with the same tokenizer, or None."""
    wanted_tokenizer, wanted_source = tokenizer_key(tokenizer), source_key(source, split)
    for folder, manifest in NEURON_STORES.matching(tokenizer_key=wanted_tokenizer):
        if manifest.get("spec", {}).get("source") == wanted_source and (folder / "unigram_counts.npy").is_file():
            return np.load(folder / "unigram_counts.npy")
    return None


def corpus_means(lm: LoadedModel, layers: list[int], n_tokens: int = DEFAULT_STORE_TOKENS,
                 seq_len: int = DEFAULT_SEQ_LEN,
                 source=None, split: str = "train", progress=None) -> dict[int, np.ndarray]:
    """Mean activation per neuron of each layer over the corpus sample (position 0 and sinks left out), from this
    model's entropy-neuron store when it holds those layers for that sample, else from the activation store
    (computed once per data dir)."""
    from interpscope.neurons.store import activation_stores

    store = find_neuron_store(lm)
    if store is not None and store.matches(n_tokens, seq_len, source, split) and set(layers) <= set(store.layers):
        return {layer: store.layer(layer)["mean"] for layer in layers}
    stores = activation_stores(lm, layers, n_tokens=n_tokens, seq_len=seq_len, source=source, split=split,
                               progress=progress)
    return {layer: s.mean for layer, s in stores.items()}
