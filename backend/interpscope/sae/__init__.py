"""Sparse autoencoders: a registry of architectures, the common folder format, activation caches, training,
evaluation, and the public API over them.

    sae = interpscope.sae.load("path/to/sae")            # an SAELens-format folder, or a shipped name (saes())
    view = interpscope.sae.features(lm, sae, text)        # features on a text (the prompt view)
    card = interpscope.sae.feature("store-name", 2407)    # a feature card from a feature store (stores())
    run = interpscope.sae.steer(lm, sae, 2407, text, strength=20.0)
    graph = interpscope.sae.circuit(lm, upstream, downstream, feature, text)
    figures = interpscope.sae.evaluate(lm, sae)
    table = interpscope.sae.train_sweep(lm, "out/", hook="blocks.15.hook_resid_post")  # a grid of SAEs, one table
    front = interpscope.sae.frontiers("assets/sae_sweeps/<name>")                      # frontiers and L0 ratios

Each returns a result with `.to_dict()` (the same document as the CLI's --json and the page's JSON export),
`.to_frame()`, `.figure()` and inline HTML in Jupyter. Names load on first use (PEP 562), so importing this package
imports no model code.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from interpscope.lazy import lazy_names

_LAZY = {
    **dict.fromkeys(("load", "features", "feature", "steer", "circuit", "evaluate", "stores", "store", "saes",
                     "train_sweep", "frontiers", "benchmark"), "interpscope.sae.api"),
    **dict.fromkeys(("SAEConfig", "SparseAutoencoder", "architecture_class", "build_sae", "canonical_architecture",
                     "registered"), "interpscope.sae.architectures"),
    **dict.fromkeys(("check_compatible", "load_sae", "save_sae"), "interpscope.sae.folder"),
}

__all__ = ["SAEConfig", "SparseAutoencoder", "architecture_class", "benchmark", "build_sae", "canonical_architecture",
           "check_compatible", "circuit", "evaluate", "feature", "features", "frontiers", "load", "load_sae",
           "registered", "saes", "save_sae", "steer", "store", "stores", "train_sweep"]

if TYPE_CHECKING:
    from interpscope.sae.api import (
        benchmark,
        circuit,
        evaluate,
        feature,
        features,
        frontiers,
        load,
        saes,
        steer,
        store,
        stores,
        train_sweep,
    )
    from interpscope.sae.architectures import (
        SAEConfig,
        SparseAutoencoder,
        architecture_class,
        build_sae,
        canonical_architecture,
        registered,
    )
    from interpscope.sae.folder import check_compatible, load_sae, save_sae


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
