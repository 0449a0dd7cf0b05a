"""Entry points of the Entropy neurons page (and `interpscope neurons detail`): what it shows on open, and one
neuron's detail card, from the model's precomputed entropy-neuron store when there is one (interpscope.entropy_neurons.
page_store; loading takes milliseconds) and computed otherwise."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from interpscope.entropy_neurons.cards import NeuronDetail, neuron_detail, stored_detail, weight_detail
from interpscope.entropy_neurons.page_store import find_neuron_store
from interpscope.entropy_neurons.ranking import candidates
from interpscope.entropy_neurons.store import DEFAULT_SEQ_LEN, DEFAULT_STORE_TOKENS, activation_stores, store_exists
from interpscope.entropy_neurons.weights import NeuronStats, check_k, check_layer

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class NeuronPage:
    """What the page shows on open: every neuron's weight statistics for one layer, the neurons picked by
    default (the three highest rho), and where the corpus-side data comes from."""

    layer: int
    k: int
    stats: NeuronStats
    default_neurons: list[str]
    store: str | None
    store_layers: list[int] = field(default_factory=list)


def neuron_page(lm: LoadedModel, layer: int | None = None, k: int | None = None) -> NeuronPage:
    """Serves the Entropy neurons page on open (the Candidates tab and the default neuron choice)."""
    layer = check_layer(lm.adapter, layer)
    k = check_k(k, lm.adapter.d_model)
    store = find_neuron_store(lm)
    if store is not None and layer in store.layers and store.stats(layer).k == k:
        stats = replace(store.stats(layer), model=lm.name)
    else:
        stats = candidates(lm, layer=layer, k=k)
    return NeuronPage(layer=layer, k=k, stats=stats,
                      default_neurons=[f"{layer}.{i}" for i in stats.ranking()[:3]],
                      store=None if store is None else str(store.folder),
                      store_layers=[] if store is None else store.layers)


def neuron_card(lm: LoadedModel, layer: int, index: int, k: int | None = None, n_tokens: int | None = None,
                compute: bool = False, progress=None) -> NeuronDetail:
    """Serves the page's Neuron detail tab and `interpscope neurons detail`: the neuron's card from the store
    when its layer is there (for `n_tokens` corpus tokens when given, as the page's slider asks; any store sample
    when None); else from the activation store on disk; else, with `compute`, after running the corpus
    (progress(fraction, text)); else the weight side only. detail.source says which."""
    layer = check_layer(lm.adapter, layer)
    store = find_neuron_store(lm)
    if store is not None and layer in store.layers and (
            n_tokens is None or store.matches(n_tokens, DEFAULT_SEQ_LEN, None, "train")):
        return stored_detail(store, lm, layer, index, k=k)
    n_tokens = n_tokens or DEFAULT_STORE_TOKENS
    if compute or store_exists(lm, layer, n_tokens):
        activations = activation_stores(lm, [layer], n_tokens=n_tokens, progress=progress)[layer]
        return neuron_detail(lm, layer, index, k=k, store=activations)
    return weight_detail(lm, layer, index, k=k)
