"""The public Python API for Fourier features of numbers (`interpscope.fourier.spectrum`, `.filter`, `.table`):
thin wrappers over the functions the Fourier page and `interpscope fourier ...` call, so a notebook gets the same
results, as the same documents (`.to_dict()`), tables and figures."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interpscope.fourier.filters import FilterTable
    from interpscope.fourier.spectra import LayerSpectra, Spectrum
    from interpscope.models.loaded import LoadedModel


def spectrum(lm: LoadedModel, numbers: int | None = None, layer: int | None = None,
             matrix: str = "embedding") -> Spectrum:
    """Fourier magnitude per frequency of the numbers 0..numbers-1 (default: every single-token number up to 520,
    or 100 for digit tokenisers): of the token embedding (`matrix="unembedding"`: W_U) when numbers are single
    tokens and no layer is asked, else of the hidden state after block `layer` (-1: the embeddings output; default:
    the last). With its outliers above the baseline and the sentence that reads it. The Fourier page's spectrum tab,
    `interpscope fourier spectrum`. Schema interpscope.fourier.spectrum."""
    from interpscope.fourier.probe import check_numbers, default_numbers
    from interpscope.fourier.spectra import auto_spectrum

    return auto_spectrum(lm, check_numbers(numbers or default_numbers(lm)), layer=layer, matrix=matrix)


def layer_spectra(lm: LoadedModel, numbers: int | None = None) -> LayerSpectra:
    """Per-layer spectra of the hidden state at each number's last token (rows: the embeddings output, then after
    each block; magnitudes unit-norm per layer), each layer's top periods and, for digit tokenisers, the n mod 10
    baseline's share of the power and the periods above it. The Fourier page's spectrum tab for models that split
    digits, `interpscope fourier spectrum --all-layers`. Schema interpscope.fourier.layer_spectra."""
    from interpscope.fourier.probe import check_numbers, default_numbers
    from interpscope.fourier.spectra import hidden_spectra

    return hidden_spectra(lm, check_numbers(numbers or default_numbers(lm)))


def filter(lm: LoadedModel, kind: str, modules: str, *, tau: int | None = None, prompts: int = 500,
           numbers: int | None = None,
           split: str = "test", positions: str = "last", template: str = "{a}+{b}=", control_seeds: int | None = None,
           batch_size: int = 512) -> FilterTable:
    """Addition accuracy with no filter and with one frequency filter in every layer: `kind` "low" (low-pass:
    removes k >= tau) or "high" (removes 1 <= k < tau), on `modules` "attn", "mlp" or "both", beside a same-rank
    random-subspace control (`control_seeds` seeds; 0 leaves it out). `interpscope fourier filter`. Schema
    interpscope.fourier.filter_table (two rows)."""
    from interpscope.fourier.probe import run_filters

    return run_filters(lm, [("none", "none"), (kind, modules)], tau=tau, prompts=prompts, numbers=numbers,
                       split=split, positions=positions, template=template, control_seeds=control_seeds,
                       batch_size=batch_size)


def table(lm: LoadedModel, *, tau: int | None = None, prompts: int = 500, numbers: int | None = None,
          split: str = "test",
          positions: str = "last", template: str = "{a}+{b}=", control_seeds: int | None = None,
          batch_size: int = 512) -> FilterTable:
    """The full filter table (no filter; high- and low-pass on attention + MLP, the MLPs, attention), each filter
    beside its random control, and the sentence that reads it (the Fourier page's Filters tab, `interpscope fourier
    table`). Schema interpscope.fourier.filter_table."""
    from interpscope.fourier.probe import run_filters

    return run_filters(lm, None, tau=tau, prompts=prompts, numbers=numbers, split=split, positions=positions,
                       template=template, control_seeds=control_seeds, batch_size=batch_size)
