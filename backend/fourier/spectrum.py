"""Fourier spectra of number representations: token embeddings/unembeddings, or hidden states per layer.

Embedding spectrum (METHODS.md 5.3): V = F W_E_num, magnitude per frequency. For tokenizers that split numbers
into digits, a number is represented by the hidden state at its last digit; the same analysis runs on those
states layer by layer (a layers x frequency map).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from backend.capture import capture, model_lock
from backend.config import InterpscopeError
from backend.fourier.basis import Outlier, find_outliers, fourier_basis, frequency_magnitude
from backend.fourier.numbers import number_embeddings, number_tokens, number_unembedding, splits_digits


@dataclass
class Spectrum:
    """Magnitude per frequency k = 1..N/2 (period N/k) of one set of number representations."""

    model: str
    source: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    outliers: list[Outlier]
    layer: int | None = None
    matrix: str = "embedding"


@dataclass
class LayerSpectra:
    """Hidden-state spectra: magnitude [layers + 1, N/2] (row 0 = embeddings output, row l+1 = after block l)."""

    model: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    top_periods: list[list[float]] = field(default_factory=list)
    layer_names: list[str] = field(default_factory=list)


def _normalised(magnitude: np.ndarray) -> np.ndarray:
    total = float(np.linalg.norm(magnitude))
    return magnitude / total if total > 0 else magnitude


def matrix_spectrum(values: np.ndarray, *, model: str = "", source: str = "embedding", matrix: str = "embedding",
                    layer: int | None = None, threshold: float = 4.0) -> Spectrum:
    """Spectrum of any [N, d] representation of the numbers 0..N-1."""
    n_numbers = int(values.shape[0])
    basis = fourier_basis(n_numbers)
    magnitude = frequency_magnitude(basis, values)
    return Spectrum(model=model, source=source, numbers=n_numbers, periods=basis.periods, magnitude=magnitude,
                    outliers=find_outliers(magnitude, n_numbers, threshold=threshold), layer=layer, matrix=matrix)


def embedding_spectrum(lm, n_numbers: int, matrix: str = "embedding") -> Spectrum:
    """Spectrum of W_E (matrix='embedding') or W_U (matrix='unembedding') restricted to numbers 0..N-1 (serves
    the Fourier page's spectrum tab for single-token numbers; computed once per process and model)."""
    from backend.fourier import precomputed
    from backend.fourier.basis import Outlier

    if matrix not in ("embedding", "unembedding"):
        raise InterpscopeError(f"Unknown matrix {matrix!r}: choose embedding or unembedding.")
    return precomputed.recall(lm, precomputed.embedding_key(n_numbers, matrix),
                              lambda: _embedding_spectrum(lm, n_numbers, matrix), Spectrum, {"outliers": Outlier})


def _embedding_spectrum(lm, n_numbers: int, matrix: str) -> Spectrum:
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


def number_hidden_states(lm, n_numbers: int, batch: int = 64, template: str | None = None) -> np.ndarray:
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
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(lm.adapter.n_layers)]
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


def hidden_spectra(lm, n_numbers: int, top: int = 5, template: str | None = None,
                   use_store: bool = True) -> LayerSpectra:
    """Per-layer spectra of the hidden states at each number's last token, with each layer's top periods (serves
    the Fourier page's spectrum tab for models that split digits). Computed once per process and model; the
    bundled models' default spectra ship precomputed (backend.fourier.precomputed).

    Magnitudes are normalised per layer (unit L2 over frequencies) so layers of different scale compare.
    """
    from backend.fourier import precomputed

    template = template or default_number_template(lm.tokenizer)
    return precomputed.recall(lm, precomputed.hidden_key(n_numbers, template, top),
                              lambda: _hidden_spectra(lm, n_numbers, top, template), LayerSpectra,
                              use_store=use_store)


def _hidden_spectra(lm, n_numbers: int, top: int, template: str) -> LayerSpectra:
    states = number_hidden_states(lm, n_numbers, template=template)
    basis = fourier_basis(n_numbers)
    rows = []
    top_periods = []
    for layer_states in states:
        magnitude = _normalised(frequency_magnitude(basis, layer_states))
        rows.append(magnitude)
        order = np.argsort(-magnitude, kind="stable")[:top]
        top_periods.append([float(basis.periods[i]) for i in order])
    names = ["embed"] + [f"layer {layer}" for layer in range(len(states) - 1)]
    return LayerSpectra(model=lm.name, numbers=n_numbers, periods=basis.periods, magnitude=np.stack(rows),
                        top_periods=top_periods, layer_names=names)


def auto_spectrum(lm, n_numbers: int, layer: int | None = None, matrix: str = "embedding") -> Spectrum:
    """The embedding spectrum when numbers are single tokens and no layer is asked; else the hidden-state one.

    layer: -1 = embeddings output, 0..L-1 = after that block.
    """
    if layer is None and not splits_digits(lm.tokenizer):
        return embedding_spectrum(lm, n_numbers, matrix=matrix)
    layer = lm.adapter.n_layers - 1 if layer is None else layer
    if not -1 <= layer < lm.adapter.n_layers:
        raise InterpscopeError(f"Layer {layer} out of range: use -1 (embeddings) .. {lm.adapter.n_layers - 1}.")
    states = number_hidden_states(lm, n_numbers)[layer + 1]
    return matrix_spectrum(states, model=lm.name, source="hidden", matrix="hidden", layer=layer)


PAPER_PERIODS = (2.0, 2.5, 5.0, 10.0)


@dataclass
class Regime:
    """Which of the paper's two regimes a spectrum looks like, and why."""

    fourier_features: bool
    label: str
    high_share: float
    matched_periods: list[float]


def describe_regime(spectrum: Spectrum | LayerSpectra, layer: int | None = None, top: int = 5) -> Regime:
    """'Fourier features' when the strongest frequencies include the paper's periods 2, 2.5, 5 or 10 (pre-trained
    regime); 'low frequencies only' otherwise (the from-scratch regime). high_share: energy share at periods <= 10."""
    magnitude = spectrum.magnitude if isinstance(spectrum, Spectrum) else spectrum.magnitude[
        -1 if layer is None else layer]
    periods = spectrum.periods
    order = np.argsort(-magnitude, kind="stable")[:top]
    matched = sorted({float(p) for p in PAPER_PERIODS if np.any(np.isclose(periods[order], p, rtol=0.02))})
    energy = magnitude ** 2
    high_share = float(energy[periods <= 10.0 + 1e-9].sum() / max(energy.sum(), 1e-300))
    if matched:
        label = (f"Fourier features: period(s) {', '.join(f'{p:g}' for p in matched)} among the {top} strongest "
                 f"frequencies, as in pre-trained models")
    else:
        label = (f"Low frequencies only: none of the periods 2, 2.5, 5, 10 is among the {top} strongest frequencies, "
                 f"as in models trained from scratch")
    return Regime(fourier_features=bool(matched), label=label, high_share=high_share, matched_periods=matched)
