"""Where entropy-neuron stores live and how their manifest is tagged (interpscope.stores): shipped in
assets/neuron_stores/, built into the data directory. A module of its own, importing no neuron analysis, so the
unigram counts (interpscope.entropy_neurons.unigram) can prefer a store's copy as the page's store reader does.
"""
from __future__ import annotations

from interpscope.config import ASSETS_DIR
from interpscope.stores import StoreKind

NEURON_STORES = StoreKind(name="entropy-neuron store", shipped=ASSETS_DIR / "neuron_stores",
                          local=("neurons", "stores"), tag="interpscope-neuron-store", indent=1,
                          build_hint="build it with `interpscope neurons store --model M --out DIR`")
