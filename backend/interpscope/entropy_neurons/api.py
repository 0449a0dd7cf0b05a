"""The public Python API for entropy and token-frequency neurons (`interpscope.entropy_neurons.candidates`, `.detail`,
`.ablate`): thin wrappers over the functions the Entropy neurons page and `interpscope neurons ...` call, so a notebook
gets the same results, as the same documents (`.to_dict()`), tables and figures."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interpscope.entropy_neurons.ablation import AblationResult
    from interpscope.entropy_neurons.cards import NeuronDetail
    from interpscope.entropy_neurons.weights import NeuronStats
    from interpscope.models.loaded import LoadedModel


def candidates(lm: LoadedModel, layer: int | None = None, k: int | None = None, top: int | None = None,
               unigram: bool = True,
               corpus=None) -> NeuronStats:
    """Every MLP neuron of `layer` (default: the last) with its write norm, LogitVar, null-space fraction rho over
    the bottom `k` singular directions of W_U, and unigram cosine (`unigram=False` skips the corpus count), sorted by
    rho; the document and table list the first `top` (None: all). The Candidates tab, `interpscope neurons`.
    Schema interpscope.entropy_neurons.candidates."""
    from interpscope.entropy_neurons.ranking import candidates as rank

    return dataclasses.replace(rank(lm, layer=layer, k=k, with_unigram=unigram, source=corpus), top=top)


def detail(lm: LoadedModel, neuron: str | tuple[int, int], k: int | None = None, compute: bool = False) -> NeuronDetail:
    """One neuron's card ("LAYER.INDEX" or (layer, index)): its write against W_U's singular directions, the tokens it
    promotes and suppresses, and, from the model's neuron store or cached activations (or after running the corpus
    with `compute=True`), its activation histogram and top contexts. The Neuron detail tab, `interpscope neurons
    detail`. Schema interpscope.entropy_neurons.detail."""
    from interpscope.entropy_neurons.ablation import parse_neurons
    from interpscope.entropy_neurons.page import neuron_card

    spec = neuron if isinstance(neuron, str) else f"{neuron[0]}.{neuron[1]}"
    parsed = parse_neurons([spec], lm.adapter)[0]
    return neuron_card(lm, parsed.layer, parsed.index, k=k, compute=compute)


def ablate(lm: LoadedModel, neurons, tokens: int = 2048, random: int = 8, seed: int = 0, k: int | None = None,
           seq_len: int = 128,
           corpus=None, mean_tokens: int | None = None, progress=None) -> AblationResult:
    """Mean-ablate `neurons` ("L.I" strings) and `random` random neurons of the same layers over `tokens` held-out
    corpus tokens: total vs direct effect on loss and entropy (the Causal ablation tab, `interpscope neurons ablate`).
    Schema interpscope.entropy_neurons.ablation."""
    from interpscope.entropy_neurons.ablation import ablate as mean_ablate

    return mean_ablate(lm, list(neurons), n_tokens=tokens, seq_len=seq_len, n_random=random, seed=seed, k=k,
                       source=corpus, mean_tokens=mean_tokens, progress=progress)
