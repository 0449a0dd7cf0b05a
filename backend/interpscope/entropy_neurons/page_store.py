"""The entropy-neuron store: everything the Entropy neurons page shows on open, precomputed per model and layer.

Per layer (one `layer{L}.npz`): the candidates' weight statistics (norm, LogitVar, rho at the default k, unigram
cosine; on what each neuron writes into the residual, through the MLP's output norm at its typical scale
`post_norm_scale` where the model has one), and over a corpus sample (8,192 tokens of the bundled corpus's train
split by default): each neuron's mean / std / min / max / firing fraction over the positions not excluded
(position 0 and massive-activation rows, interpscope.sinks), its activation histogram over those positions, and its top
activating contexts with their left context (token ids around the firing token, which is never position 0 of its
window). The folder also keeps the corpus's token counts (the unigram direction) and a manifest naming the model
(content key), the corpus sample and the settings. Built by `interpscope neurons store --model M --out DIR`
(interpscope.entropy_neurons.store_build: resumable, layer by layer; it writes only into a folder it created or that
already
holds such a store), shipped in assets/neuron_stores/<model>/.

This module reads stores and answers from them (find_neuron_store, corpus_means; the MLP output norm's scale in
interpscope.entropy_neurons.postnorm, the cards' corpus side in interpscope.entropy_neurons.cards.stored_detail), so it
imports none
of the analyses that prefer a store; the build, which runs them, imports this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.store import DEFAULT_SEQ_LEN, DEFAULT_STORE_TOKENS, activation_stores, model_key
from interpscope.entropy_neurons.store_kind import NEURON_STORES
from interpscope.entropy_neurons.unigram import source_key
from interpscope.entropy_neurons.weights import NeuronStats

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

TOP_CONTEXTS, BINS = 20, 60
CONTEXT_LEFT, CONTEXT_RIGHT = 12, 4  # tokens kept left and right of a firing token (cards show the same)


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


def find_neuron_store(lm: LoadedModel) -> NeuronStore | None:
    """The store built for this very model (same content key), shipped in assets/ or built into the data dir."""
    for folder, _ in NEURON_STORES.matching(model_key=model_key(lm)):
        store = NeuronStore(folder)
        if store.current(lm.adapter):
            return store
    return None


def corpus_means(lm: LoadedModel, layers: list[int], n_tokens: int = DEFAULT_STORE_TOKENS,
                 seq_len: int = DEFAULT_SEQ_LEN,
                 source=None, split: str = "train", progress=None) -> dict[int, np.ndarray]:
    """Mean activation per neuron of each layer over the corpus sample (position 0 and sinks left out), from this
    model's entropy-neuron store when it holds those layers for that sample, else from the activation store
    (computed once per data dir)."""
    store = find_neuron_store(lm)
    if store is not None and store.matches(n_tokens, seq_len, source, split) and set(layers) <= set(store.layers):
        return {layer: store.layer(layer)["mean"] for layer in layers}
    stores = activation_stores(lm, layers, n_tokens=n_tokens, seq_len=seq_len, source=source, split=split,
                               progress=progress)
    return {layer: s.mean for layer, s in stores.items()}
