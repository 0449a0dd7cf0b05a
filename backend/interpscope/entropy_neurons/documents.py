"""How the entropy-neuron results read as one document: the JSON that `interpscope neurons [detail|ablate] --json`,
the Entropy neurons page's JSON export and the Python API's `to_dict()` all give, with their tidy tables and figures.
NeuronStats, NeuronDetail and AblationResult inherit these; figures come from interpscope.figures, imported only
when asked for.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from interpscope.results import Result, to_plain

SUMMARY_KEYS = ("loss_total_abs", "loss_direct_abs", "entropy_total_abs", "entropy_direct_abs")


class CandidatesDocument(Result):
    """A layer's candidate entropy / token-frequency neurons (the Candidates tab, `interpscope neurons`,
    `interpscope.entropy_neurons.candidates`): model, layer, k, the MLP output norm's scale where there is one, and the
    neurons sorted by rho (the first `top`, or all)."""

    SCHEMA = "interpscope.neurons.candidates"
    SCHEMA_VERSION = 1

    # the fields this document reads; NeuronStats (a dataclass) defines them
    layer: int
    k: int
    norm: np.ndarray
    logit_var: np.ndarray
    rho: np.ndarray
    post_scale: float | None
    model: str | None
    top: int | None

    def rows(self, top: int | None = None) -> list[dict]:
        """The neurons sorted by rho, the first `top` or all (NeuronStats)."""
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        return to_plain({"model": self.model, "layer": self.layer, "k": self.k, "post_scale": self.post_scale,
                         "neurons": self.rows(self.top)})

    def tidy(self) -> list[dict]:
        return self.rows(self.top)

    def figure(self):
        from interpscope.figures.entropy_neurons import candidates_scatter

        return candidates_scatter(self.norm, self.logit_var, self.rho, self.layer, self.k, (), self.model or "")


class DetailDocument(Result):
    """One neuron's card (the Neuron detail tab, `interpscope entropy-neurons detail`,
    `interpscope.entropy_neurons.detail`): its
    weights against W_U's singular directions, the tokens it promotes and suppresses, and where a store or cached
    activations cover its layer, the activation histogram, mean and top contexts (absent otherwise)."""

    SCHEMA = "interpscope.neurons.detail"
    SCHEMA_VERSION = 1

    # the fields this document reads; NeuronDetail (a dataclass) defines them
    layer: int
    index: int
    k: int
    singular_values: np.ndarray
    cosines: np.ndarray

    @property
    def label(self) -> str:
        return f"{self.layer}.{self.index}"

    def tidy(self) -> list[dict]:
        """One row per singular direction of W_U (largest first): its singular value and the neuron's cosine."""
        return [{"neuron": self.label, "direction": i, "singular_value": float(s), "cosine": float(c),
                 "bottom_k": i >= len(self.singular_values) - self.k}
                for i, (s, c) in enumerate(zip(self.singular_values, self.cosines, strict=True))]

    def figure(self):
        from interpscope.figures.entropy_neurons import spectrum_figure

        return spectrum_figure(self.singular_values, self.cosines, self.k, self.label)


class AblationDocument(Result):
    """Mean ablation of chosen neurons beside random ones (the Causal ablation tab, `interpscope entropy-neurons
    ablate`, `interpscope.entropy_neurons.ablate`): the clean figures, each neuron's total and direct effects, the
    random neurons' mean (absent without random neurons), notes and seconds. Per-token arrays stay on the object."""

    SCHEMA = "interpscope.neurons.ablation"
    SCHEMA_VERSION = 1

    # the fields this document reads; AblationResult (a dataclass) defines them
    model: str
    n_tokens: int
    k: int
    clean_loss: float
    clean_entropy: float
    clean_kl_unigram: float | None
    effects: list[Any]  # NeuronEffects (not imported: interpscope.entropy_neurons.ablation imports this module)
    seconds: float
    notes: list[str]

    def chosen(self) -> list[Any]:
        """The chosen neurons' effects (AblationResult)."""
        raise NotImplementedError

    def random(self) -> list[Any]:
        """The random neurons' effects (AblationResult)."""
        raise NotImplementedError

    def random_summary(self) -> dict[str, float] | None:
        randoms = self.random()
        if not randoms:
            return None
        return {key + "_mean": sum(getattr(r, key) for r in randoms) / len(randoms) for key in SUMMARY_KEYS}

    def payload(self) -> dict[str, Any]:
        return to_plain({"model": self.model, "n_tokens": self.n_tokens, "k": self.k, "clean_loss": self.clean_loss,
                         "clean_entropy": self.clean_entropy, "clean_kl_unigram": self.clean_kl_unigram,
                         "neurons": self.chosen(), "random": self.random(), "random_summary": self.random_summary(),
                         "notes": self.notes or None, "seconds": self.seconds})

    def tidy(self) -> list[dict]:
        return to_plain(self.effects)

    def figure(self, quantity: str = "loss"):
        """Mean |change| of the loss (or quantity='entropy') under ablation: total vs direct, as the page shows."""
        from interpscope.figures.entropy_neurons import effects_bars

        effects = self.effects
        return effects_bars([e.neuron for e in effects], [getattr(e, f"{quantity}_total_abs") for e in effects],
                            [getattr(e, f"{quantity}_direct_abs") for e in effects], [e.is_random for e in effects],
                            quantity)
