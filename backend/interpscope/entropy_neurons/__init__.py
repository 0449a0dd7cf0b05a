"""Entropy neurons and token-frequency neurons (Stolfo et al., NeurIPS 2024): find them from the weights,
prove what they do by mean ablation (total vs direct effect), and watch them on induction and on any text.

    stats = interpscope.entropy_neurons.candidates(lm, layer=-1, top=20)   # sorted by null-space fraction rho
    card = interpscope.entropy_neurons.detail(lm, "29.11")                   # one neuron's card
    effects = interpscope.entropy_neurons.ablate(lm, ["29.11"], tokens=2048)

Each returns a result with `.to_dict()` (the same document as the CLI's --json and the page's JSON export),
`.to_frame()`, `.figure()` and inline HTML in Jupyter. Names load on first use (PEP 562), so importing this package
imports no model code.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from interpscope.lazy import lazy_names

_LAZY = {
    **dict.fromkeys(("candidates", "detail", "ablate"), "interpscope.entropy_neurons.api"),
    **dict.fromkeys(("AblationResult", "Neuron", "NeuronEffect", "parse_neurons", "token_effects"),
                    "interpscope.entropy_neurons.ablation"),
    **dict.fromkeys(("NeuronDetail", "TextActivations", "neuron_detail", "text_activations"),
                    "interpscope.entropy_neurons.cards"),
    **dict.fromkeys(("InductionResult", "induction_study"), "interpscope.entropy_neurons.induction"),
    **dict.fromkeys(("ActivationStore", "activation_stores", "mean_activations"), "interpscope.entropy_neurons.store"),
    **dict.fromkeys(("NeuronStats", "default_k", "neuron_stats", "unembed_basis"),
                    "interpscope.entropy_neurons.weights"),
}

__all__ = ["AblationResult", "ActivationStore", "InductionResult", "Neuron", "NeuronDetail", "NeuronEffect",
           "NeuronStats", "TextActivations", "ablate", "activation_stores", "candidates", "default_k", "detail",
           "induction_study", "mean_activations", "neuron_detail", "neuron_stats", "parse_neurons",
           "text_activations", "token_effects", "unembed_basis"]

if TYPE_CHECKING:
    from interpscope.entropy_neurons.ablation import AblationResult, Neuron, NeuronEffect, parse_neurons, token_effects
    from interpscope.entropy_neurons.api import ablate, candidates, detail
    from interpscope.entropy_neurons.cards import NeuronDetail, TextActivations, neuron_detail, text_activations
    from interpscope.entropy_neurons.induction import InductionResult, induction_study
    from interpscope.entropy_neurons.store import ActivationStore, activation_stores, mean_activations
    from interpscope.entropy_neurons.weights import NeuronStats, default_k, neuron_stats, unembed_basis


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
