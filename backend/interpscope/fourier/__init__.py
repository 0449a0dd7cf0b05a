"""Fourier features of numbers (Zhou et al., NeurIPS 2024): spectra, Fourier-space logit lens, frequency filters.

    spec = interpscope.fourier.spectrum(lm)                      # magnitude per frequency, outliers, baseline
    layers = interpscope.fourier.layer_spectra(lm)               # every layer's hidden-state spectrum
    one = interpscope.fourier.filter(lm, "low", "both", tau=52)   # accuracy without and with one filter
    full = interpscope.fourier.table(lm)                          # the whole filter table with its controls

Each returns a result with `.to_dict()` (the same document as the CLI's --json and the page's JSON export),
`.to_frame()`, `.figure()` and inline HTML in Jupyter. Names load on first use (PEP 562), so importing this package
imports no model code.

Modules: basis (orthonormal basis, periods, outliers), numbers (number tokens), spectra (embedding and hidden-state
spectra), data (addition task and split), addition (accuracy), lens (module logit lens in Fourier space, top
components), filters (null-space projections and the ablation table), probe (numbers and prompts a model supports,
the filter runs), documents (the results as documents), vocab (adder tokenizer), api (the functions above).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from interpscope.lazy import lazy_names

_LAZY = dict.fromkeys(("spectrum", "layer_spectra", "filter", "table"), "interpscope.fourier.api")

__all__ = ["filter", "layer_spectra", "spectrum", "table"]

if TYPE_CHECKING:
    from interpscope.fourier.api import filter, layer_spectra, spectrum, table


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
