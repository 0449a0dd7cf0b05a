"""Entropy neurons and token-frequency neurons (Stolfo et al., NeurIPS 2024): find them from the weights,
prove what they do by mean ablation (total vs direct effect), and watch them on induction and on any text."""
from interpscope.neurons.ablation import AblationResult, Neuron, NeuronEffect, ablate, parse_neurons, token_effects
from interpscope.neurons.ranking import candidates
from interpscope.neurons.cards import NeuronDetail, TextActivations, neuron_detail, text_activations
from interpscope.neurons.induction import InductionResult, induction_study
from interpscope.neurons.store import ActivationStore, activation_stores, mean_activations
from interpscope.neurons.weights import NeuronStats, default_k, neuron_stats, unembed_basis

__all__ = ["AblationResult", "ActivationStore", "InductionResult", "Neuron", "NeuronDetail", "NeuronEffect",
           "NeuronStats", "TextActivations", "ablate", "activation_stores", "candidates", "default_k",
           "induction_study", "mean_activations", "neuron_detail", "neuron_stats", "parse_neurons",
           "text_activations", "token_effects", "unembed_basis"]
