"""Fourier spectra of number representations: token embeddings/unembeddings, or hidden states per layer.

Embedding spectrum (docs/methods/fourier.md): V = F W_E_num, magnitude per frequency. For tokenizers that split numbers
into digits, a number is represented by the hidden state at its last digit; the same analysis runs on those
states layer by layer (a layers x frequency map). Every spectrum carries its baseline (interpscope.fourier.baseline):
for digit tokenisers the power a function of n mod 10 explains by construction, else a shuffled-numbers control;
an outlier is a frequency above that baseline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import capture, model_lock
from interpscope.config import InterpscopeError
from interpscope.fourier.baseline import (
    DIGIT_BASE,
    SHUFFLES,
    by_construction_periods,
    digit_baseline,
    outliers_above,
    shuffled_control,
)
from interpscope.fourier.basis import Outlier, fourier_basis, frequency_magnitude
from interpscope.fourier.documents import LayerSpectraDocument, SpectrumDocument
from interpscope.fourier.numbers import number_embeddings, number_tokens, number_unembedding, splits_digits

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class Spectrum(SpectrumDocument):
    """Magnitude per frequency k = 1..N/2 (period N/k) of one set of number representations."""

    model: str
    source: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    outliers: list[Outlier]
    layer: int | None = None
    matrix: str = "embedding"
    baseline: str | None = None
    baseline_magnitude: np.ndarray | None = None
    baseline_share: float | None = None
    baseline_periods: list[float] | None = None

    def baseline_reading(self) -> str:
        return baseline_sentence(self)


@dataclass
class LayerSpectra(LayerSpectraDocument):
    """Hidden-state spectra: magnitude [layers + 1, N/2] (row 0 = embeddings output, row l+1 = after block l)."""

    model: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    top_periods: list[list[float]] = field(default_factory=list)
    layer_names: list[str] = field(default_factory=list)
    baseline: str | None = None
    baseline_share: list[float] | None = None
    baseline_periods: list[float] | None = None
    outlier_periods: list[list[float]] | None = None

    def baseline_reading(self) -> str:
        return baseline_sentence(self)


def _normalised(magnitude: np.ndarray) -> np.ndarray:
    total = float(np.linalg.norm(magnitude))
    return magnitude / total if total > 0 else magnitude


DIGIT_BASELINE = f"n mod {DIGIT_BASE} (digit tokeniser: the state at a number's last digit starts as that digit)"
SHUFFLED_BASELINE = f"shuffled numbers (the largest of {SHUFFLES} seeded permutations of the rows)"


def matrix_spectrum(values: np.ndarray, *, model: str = "", source: str = "embedding", matrix: str = "embedding",
                    layer: int | None = None, threshold: float = 4.0, digits: bool = False) -> Spectrum:
    """Spectrum of any [N, d] representation of the numbers 0..N-1, with its baseline: digits=True for states
    read at the last digit of a digit tokeniser (the n mod 10 baseline), else the shuffled-numbers control."""
    n_numbers = int(values.shape[0])
    basis = fourier_basis(n_numbers)
    magnitude = frequency_magnitude(basis, values)
    if digits:
        base = digit_baseline(values, threshold=threshold)
        return Spectrum(model=model, source=source, numbers=n_numbers, periods=basis.periods, magnitude=magnitude,
                        outliers=base.outliers, layer=layer, matrix=matrix, baseline=DIGIT_BASELINE,
                        baseline_magnitude=base.magnitude, baseline_share=base.share,
                        baseline_periods=by_construction_periods(n_numbers))
    control = shuffled_control(values)
    return Spectrum(model=model, source=source, numbers=n_numbers, periods=basis.periods, magnitude=magnitude,
                    outliers=outliers_above(magnitude, control, n_numbers, threshold=threshold), layer=layer,
                    matrix=matrix, baseline=SHUFFLED_BASELINE, baseline_magnitude=control)


def embedding_spectrum(lm: LoadedModel, n_numbers: int, matrix: str = "embedding", use_store: bool = True) -> Spectrum:
    """Spectrum of W_E (matrix='embedding') or W_U (matrix='unembedding') restricted to numbers 0..N-1 (serves
    the Fourier page's spectrum tab for single-token numbers; computed once per process and model)."""
    from interpscope.fourier import precomputed
    from interpscope.fourier.basis import Outlier

    if matrix not in ("embedding", "unembedding"):
        raise InterpscopeError(f"Unknown matrix {matrix!r}: choose embedding or unembedding.")
    return precomputed.recall(lm, precomputed.embedding_key(n_numbers, matrix),
                              lambda: _embedding_spectrum(lm, n_numbers, matrix), Spectrum, {"outliers": Outlier},
                              use_store=use_store)


def _embedding_spectrum(lm: LoadedModel, n_numbers: int, matrix: str) -> Spectrum:
    tokens = number_tokens(lm.tokenizer, n_numbers)
    if matrix == "embedding":
        values = number_embeddings(lm.adapter, tokens)
    elif matrix == "unembedding":
        values = number_unembedding(lm.adapter, tokens).T.double().cpu().numpy()
    else:
        raise InterpscopeError(f"Unknown matrix {matrix!r}: choose embedding or unembedding.")
    return matrix_spectrum(values, model=lm.name, source="embedding", matrix=matrix)


def default_number_template(tokenizer) -> str:
    """'{n}' when the tokenizer puts a BOS token in front itself; else a short context ('Number: {n}'), so the
    number never sits at position 0, where many models park an attention sink with a huge residual norm."""
    with_special = tokenizer("7").input_ids
    without = tokenizer("7", add_special_tokens=False).input_ids
    return "{n}" if len(with_special) > len(without) else "Number: {n}"


def number_hidden_states(lm: LoadedModel, n_numbers: int, batch: int = 64, template: str | None = None) -> np.ndarray:
    """Hidden state at each number's last token, per layer: [layers + 1, N, d_model] (float64).

    Row 0 is the input of block 0 (embeddings), row l + 1 the residual stream after block l (before any final
    norm). Each number is run on its own (written with `template`), right-padded, so the last real token's
    state is untouched by padding under causal attention.
    """
    template = template or default_number_template(lm.tokenizer)
    if "{n}" not in template:
        raise InterpscopeError("The number template needs a {n}.")
    tokenizer = lm.tokenizer
    texts = [template.format(n=n) for n in range(n_numbers)]
    states: list[np.ndarray] = []
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(lm.adapter.n_layers)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with model_lock(lm):
        for start in range(0, n_numbers, batch):
            encoded = [tokenizer(text).input_ids for text in texts[start:start + batch]]
            width = max(len(ids) for ids in encoded)
            ids = torch.full((len(encoded), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, seq in enumerate(encoded):
                ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            last = mask.sum(dim=1) - 1
            result = capture(lm.adapter, ids.to(lm.device), names, attention_mask=mask.to(lm.device))
            stacked = torch.stack([result.activations[name].reshape(len(encoded), width, -1) for name in names])
            states.append(stacked[:, torch.arange(len(encoded)), last].double().numpy())
    return np.concatenate(states, axis=1)


def hidden_spectra(lm: LoadedModel, n_numbers: int, top: int = 5, template: str | None = None,
                   use_store: bool = True) -> LayerSpectra:
    """Per-layer spectra of the hidden states at each number's last token, with each layer's top periods (serves
    the Fourier page's spectrum tab for models that split digits). Computed once per process and model; the
    bundled models' default spectra ship precomputed (interpscope.fourier.precomputed).

    Magnitudes are normalised per layer (unit L2 over frequencies) so layers of different scale compare.
    """
    from interpscope.fourier import precomputed

    template = template or default_number_template(lm.tokenizer)
    return precomputed.recall(lm, precomputed.hidden_key(n_numbers, template, top),
                              lambda: _hidden_spectra(lm, n_numbers, top, template), LayerSpectra,
                              use_store=use_store)


def _hidden_spectra(lm: LoadedModel, n_numbers: int, top: int, template: str) -> LayerSpectra:
    states = number_hidden_states(lm, n_numbers, template=template)
    basis = fourier_basis(n_numbers)
    rows, top_periods, shares, outliers = [], [], [], []
    for layer_states in states:
        magnitude = _normalised(frequency_magnitude(basis, layer_states))
        rows.append(magnitude)
        order = np.argsort(-magnitude, kind="stable")[:top]
        top_periods.append([float(basis.periods[i]) for i in order])
        base = digit_baseline(layer_states)
        shares.append(base.share)
        outliers.append([float(o.period) for o in base.outliers])
    names = ["embed"] + [f"layer {layer}" for layer in range(len(states) - 1)]
    return LayerSpectra(model=lm.name, numbers=n_numbers, periods=basis.periods, magnitude=np.stack(rows),
                        top_periods=top_periods, layer_names=names, baseline=DIGIT_BASELINE, baseline_share=shares,
                        baseline_periods=by_construction_periods(n_numbers), outlier_periods=outliers)


def auto_spectrum(lm: LoadedModel, n_numbers: int, layer: int | None = None, matrix: str = "embedding") -> Spectrum:
    """The embedding spectrum when numbers are single tokens and no layer is asked; else the hidden-state one.

    layer: -1 = embeddings output, 0..L-1 = after that block.
    """
    if layer is None and not splits_digits(lm.tokenizer):
        return embedding_spectrum(lm, n_numbers, matrix=matrix)
    layer = lm.adapter.n_layers - 1 if layer is None else layer
    if not -1 <= layer < lm.adapter.n_layers:
        raise InterpscopeError(f"Layer {layer} out of range: use -1 (embeddings) .. {lm.adapter.n_layers - 1}.")
    states = number_hidden_states(lm, n_numbers)[layer + 1]
    return matrix_spectrum(states, model=lm.name, source="hidden", matrix="hidden", layer=layer,
                           digits=splits_digits(lm.tokenizer))


PAPER_PERIODS = (2.0, 2.5, 5.0, 10.0)


@dataclass
class Regime:
    """Which of the paper's two regimes a spectrum looks like, and why."""

    fourier_features: bool
    label: str
    high_share: float
    matched_periods: list[float]


def describe_regime(spectrum: Spectrum | LayerSpectra, layer: int | None = None, top: int = 5) -> Regime:
    """'Fourier features' when the paper's periods 2, 2.5, 5 or 10 are outliers above the spectrum's baseline
    (pre-trained regime); 'low frequencies only' otherwise (from scratch). A period that the tokenisation puts there
    by construction is never counted. Spectra without a baseline (old stores) fall back to the `top` strongest
    frequencies. high_share: energy share at periods <= 10."""
    magnitude = spectrum.magnitude if isinstance(spectrum, Spectrum) else spectrum.magnitude[
        -1 if layer is None else layer]
    periods = spectrum.periods
    if isinstance(spectrum, Spectrum) and spectrum.baseline is not None:
        candidates = np.array([o.period for o in spectrum.outliers])
        where = "among the outliers above the baseline"
    elif isinstance(spectrum, LayerSpectra) and spectrum.outlier_periods is not None:
        candidates = np.array(spectrum.outlier_periods[-1 if layer is None else layer])
        where = "among the outliers above the n mod 10 baseline"
    else:
        candidates = periods[np.argsort(-magnitude, kind="stable")[:top]]
        where = f"among the {top} strongest frequencies"
    built_in = spectrum.baseline_periods or []
    matched = sorted({float(p) for p in PAPER_PERIODS if np.any(np.isclose(candidates, p, rtol=0.02)) and
                      not np.any(np.isclose(built_in, p, rtol=1e-6))})
    energy = magnitude ** 2
    high_share = float(energy[periods <= 10.0 + 1e-9].sum() / max(energy.sum(), 1e-300))
    excluded = [p for p in PAPER_PERIODS if np.any(np.isclose(built_in, p, rtol=1e-6))]
    caveat = (f" (periods {', '.join(f'{p:g}' for p in excluded)} are there by construction of the digit "
              "tokenisation and do not count)") if excluded else ""
    if matched:
        label = (f"Fourier features: period(s) {', '.join(f'{p:g}' for p in matched)} {where}, as in pre-trained "
                 f"models{caveat}")
    elif excluded and len(excluded) == len(PAPER_PERIODS):
        label = ("Not testable here: every one of the paper's periods 2, 2.5, 5, 10 is put there by the digit "
                 "tokenisation, so none can be an outlier above its baseline")
    else:
        label = (f"Low frequencies only: none of the periods 2, 2.5, 5, 10 is {where}, as in models trained from "
                 f"scratch{caveat}")
    return Regime(fourier_features=bool(matched), label=label, high_share=high_share, matched_periods=matched)


def _periods_text(periods) -> str:
    return ", ".join(f"{p:.3g}" for p in periods)


def _layers_baseline_sentence(spectra: LayerSpectra) -> str:
    if spectra.baseline_share is None:
        return "This spectrum was stored without its tokenisation baseline; rebuild the Fourier store."
    first, last = spectra.baseline_share[0], spectra.baseline_share[-1]
    above = spectra.outlier_periods[-1] if spectra.outlier_periods else []
    return (f"Tokenisation baseline: a pure function of n mod 10 has power only at periods "
            f"{_periods_text(spectra.baseline_periods)}, and it explains {first:.1%} of the power at the "
            f"embeddings ({spectra.layer_names[0]}) and {last:.1%} at the last layer. Outliers are taken "
            "above it: " + (f"the last layer's are at periods {_periods_text(above)}." if above else
                           "the last layer has none."))


def baseline_sentence(spectrum: Spectrum | LayerSpectra) -> str:
    """What the baseline explains and which outliers stand above it, from the spectrum's own numbers."""
    if isinstance(spectrum, LayerSpectra):
        return _layers_baseline_sentence(spectrum)
    if spectrum.baseline is None:
        return "This spectrum was stored without a baseline; its outliers are robust z-scores only."
    names = _periods_text([o.period for o in spectrum.outliers])
    if spectrum.baseline_share is not None:
        return (f"Tokenisation baseline: a pure function of n mod 10 has power only at periods "
                f"{_periods_text(spectrum.baseline_periods)} and explains {spectrum.baseline_share:.1%} of this "
                "spectrum's power; none of those periods is called an outlier. "
                + (f"Above the baseline: periods {names}." if spectrum.outliers else "Nothing stands above it."))
    return (f"Control: the same vectors assigned to shuffled numbers ({SHUFFLES} seeded permutations); an outlier "
            "must be a robust-z outlier and stronger than every shuffle. "
            + (f"Outliers: periods {names}." if spectrum.outliers else "No frequency stands above the control."))
