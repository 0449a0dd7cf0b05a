"""Building a Fourier store: what the Fourier page shows on first open with its defaults, computed and saved.

`interpscope fourier store --model M --out DIR` calls build_fourier_store; the store format, the lookup and the
per-process memory are interpscope.fourier.precomputed's, which the analyses (spectra, addition) call. The build
lives here, above those analyses, so the store module never imports them back.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from interpscope.fourier.addition import run_addition, small_sum_pairs
from interpscope.fourier.numbers import splits_digits
from interpscope.fourier.precomputed import embedding_key, hidden_key, probe_key, save_entries
from interpscope.fourier.probe import DIGIT_PROBE_PROMPTS, default_numbers
from interpscope.fourier.spectra import default_number_template, embedding_spectrum, hidden_spectra

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def build_fourier_store(lm: LoadedModel, out: str | Path) -> Path:
    """Compute what the Fourier page shows on first open with its defaults and save it (see the module doc of
    interpscope.fourier.precomputed)."""
    n_numbers = default_numbers(lm)
    results: dict[str, object] = {}
    if splits_digits(lm.tokenizer):
        template = default_number_template(lm.tokenizer)
        results[hidden_key(n_numbers, template)] = hidden_spectra(lm, n_numbers, template=template, use_store=False)
        pairs = small_sum_pairs(DIGIT_PROBE_PROMPTS)
        results[probe_key(pairs, "{a}+{b}=", "")] = run_addition(lm, pairs, "{a}+{b}=", use_store=False)
    else:
        for matrix in ("embedding", "unembedding"):
            results[embedding_key(n_numbers, matrix)] = embedding_spectrum(lm, n_numbers, matrix=matrix,
                                                                           use_store=False)
    return save_entries(lm, out, results)
