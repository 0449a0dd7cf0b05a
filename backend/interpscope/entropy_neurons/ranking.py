"""Candidate entropy and token-frequency neurons of a loaded model: weight statistics with the unigram cosine."""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from interpscope.entropy_neurons.postnorm import layer_post_scale
from interpscope.entropy_neurons.unigram import token_counts, unigram_direction
from interpscope.entropy_neurons.weights import NeuronStats, check_layer, neuron_stats

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def candidates(lm: LoadedModel, layer: int | None = None, k: int | None = None, with_unigram: bool = True,
               source=None) -> NeuronStats:
    """Norm, LogitVar, rho (bottom-k null-space fraction) and unigram cosine of every neuron of `layer`
    (default: the final layer), through the MLP's output norm where there is one. Token counts for the unigram
    direction come from the on-disk cache."""
    unigram = None
    if with_unigram:
        counts = token_counts(lm.tokenizer, lm.adapter.vocab_size, source=source)
        unigram = unigram_direction(counts)
    layer = check_layer(lm.adapter, layer)
    stats = neuron_stats(lm.adapter, layer, k, unigram, post_scale=layer_post_scale(lm, layer))
    return dataclasses.replace(stats, model=lm.name)


def timed_candidates(lm: LoadedModel, **kwargs) -> tuple[NeuronStats, float]:
    """candidates() and the seconds it took (for the benchmark and the page's status line)."""
    start = time.perf_counter()
    stats = candidates(lm, **kwargs)
    return stats, time.perf_counter() - start
