"""How the Fourier results read as one document: the JSON that `interpscope fourier spectrum|filter|table --json`,
the Fourier page's JSON export and the Python API's `to_dict()` all give, with their tidy tables and figures.
Spectrum and FilterTable inherit these and supply the sentence that reads them (spectra and filters import this module,
never the other way round); figures come from interpscope.figures, imported only when asked for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.fourier.basis import Outlier


class SpectrumDocument(Result):
    """Fourier magnitude per frequency of the number representations (the Fourier page's spectrum tab,
    `interpscope fourier spectrum`, `interpscope.fourier.spectrum`), its outliers and baseline (the shuffled-numbers
    control, or the n mod 10 share for digit tokenisers; absent where not computed) and the sentence that reads it."""

    SCHEMA = "interpscope.fourier.spectrum"
    SCHEMA_VERSION = 1

    # the fields this document reads; Spectrum (a dataclass) defines them
    model: str
    source: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    outliers: list[Outlier]
    layer: int | None
    matrix: str
    baseline_magnitude: np.ndarray | None

    def baseline_reading(self) -> str:
        """What the baseline explains and which outliers stand above it (Spectrum: spectra.baseline_sentence)."""
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        return {**to_plain(self), "reading": self.baseline_reading()}

    def tidy(self) -> list[dict]:
        """One row per frequency k = 1..N/2: period, magnitude, baseline (when there is one), outlier or not."""
        outliers = {o.frequency for o in self.outliers}
        base = self.baseline_magnitude
        return [{"frequency": k, "period": float(p), "magnitude": float(m),
                 "baseline": None if base is None else float(base[k - 1]), "outlier": k in outliers}
                for k, (p, m) in enumerate(zip(self.periods, self.magnitude, strict=True), start=1)]

    def figure(self):
        from interpscope.figures.fourier import spectrum_figure

        what = (f"the number-token {self.matrix}s" if self.source == "embedding"
                else f"the hidden state after block {self.layer}" if self.layer is not None and self.layer >= 0
                else "the embeddings output")
        control = "shuffled-numbers control (max)" if self.source == "embedding" else "baseline"
        return spectrum_figure(self.periods, self.magnitude, [o.period for o in self.outliers],
                               f"{self.model}: Fourier magnitude of {what} (0..{self.numbers - 1})",
                               baseline=self.baseline_magnitude, baseline_name=control)


class LayerSpectraDocument(Result):
    """Per-layer spectra of the hidden state at each number's last token (the Fourier page's spectrum tab for a model
    that splits digits, `interpscope fourier spectrum --all-layers`, `interpscope.fourier.layer_spectra`): magnitude
    [layers + 1, N/2] (unit norm per layer; row 0 the embeddings output), each layer's top periods, and the n mod 10
    baseline's share and the periods above it (absent where not computed), with the sentence that reads them."""

    SCHEMA = "interpscope.fourier.layer_spectra"
    SCHEMA_VERSION = 1

    # the fields this document reads; LayerSpectra (a dataclass) defines them
    model: str
    numbers: int
    periods: np.ndarray
    magnitude: np.ndarray
    top_periods: list[list[float]]
    layer_names: list[str]
    baseline_share: list[float] | None
    outlier_periods: list[list[float]] | None

    def baseline_reading(self) -> str:
        """What the baseline explains, layer by layer (LayerSpectra: spectra.baseline_sentence)."""
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        return {**to_plain(self), "reading": self.baseline_reading()}

    def tidy(self) -> list[dict]:
        """One row per layer: its top periods, the baseline's share of its power and the periods above it."""
        return [{"layer": name, "top_periods": list(self.top_periods[i]) if i < len(self.top_periods) else None,
                 "baseline_share": None if self.baseline_share is None else float(self.baseline_share[i]),
                 "outlier_periods": None if self.outlier_periods is None else list(self.outlier_periods[i])}
                for i, name in enumerate(self.layer_names)]

    def figure(self):
        from interpscope.figures.fourier import layer_frequency_heatmap

        return layer_frequency_heatmap(self.magnitude, self.periods, self.layer_names,
                                       f"{self.model}: hidden state at each number's last token, per layer",
                                       "magnitude (unit norm per layer)")


def error_histogram(errors: np.ndarray) -> dict[str, int]:
    """Counts of each non-zero numeric error (prediction - answer) of a filter row."""
    numeric = errors[~np.isnan(errors) & (errors != 0)].astype(int)
    values, counts = np.unique(numeric, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts, strict=True)}


def row_document(row) -> dict[str, Any]:
    """One filter row as the document lists it (control figures flat beside it: interpscope.fourier.controls)."""
    from interpscope.fourier.controls import control_fields

    return {"kind": row.kind, "modules": row.modules, "removed": row.removed, "loss": row.loss,
            "accuracy": row.accuracy, "within_2": row.within_2, "within_10": row.within_10, "rank": row.rank,
            "zeroes_everything": row.zeroes_everything, "error_counts": row.error_counts,
            "error_histogram": error_histogram(row.errors), **control_fields(row.control)}


class FilterTableDocument(Result):
    """Addition accuracy with no filter and with frequency filters, each beside its same-rank random control (the
    Fourier page's Filters tab, `interpscope fourier filter|table`, `interpscope.fourier.filter|table`). One filter is
    the table of two rows (no filter, the filter); `reading` is the sentence about it (absent when there is none)."""

    SCHEMA = "interpscope.fourier.filter_table"
    SCHEMA_VERSION = 1

    # the fields this document reads; FilterTable (a dataclass) defines them
    model: str
    template: str
    numbers: int
    tau: int
    d_model: int
    prompts: int
    positions: str
    seconds: float
    warnings: list[str]
    requested_prompts: int | None
    control_seeds: list[int]
    split: str | None
    rows: list[Any]  # FilterRows (not imported: interpscope.fourier.filters imports this module)

    def labels(self) -> list[str]:
        return ["no filter" if r.kind == "none" else f"{'low' if r.kind == 'low' else 'high'}-pass {r.modules}"
                for r in self.rows]

    def table_reading(self) -> str | None:
        """The sentence about the whole table, None without the rows it compares (FilterTable: filters.reading)."""
        raise NotImplementedError

    def reading_text(self) -> str | None:
        from interpscope.fourier.controls import describe

        sentence = self.table_reading()
        row = self.rows[1] if len(self.rows) == 2 else None
        if sentence is None and row is not None and row.control is not None:
            sentence = describe(f"The {'low' if row.kind == 'low' else 'high'}-pass on {row.modules}", row.control,
                                row.rank) + "."
        return sentence

    def payload(self) -> dict[str, Any]:
        return to_plain({"model": self.model, "template": self.template, "numbers": self.numbers, "tau": self.tau,
                         "d_model": self.d_model, "prompts": self.prompts, "requested_prompts": self.requested_prompts,
                         "split": self.split, "positions": self.positions, "seconds": self.seconds,
                         "control_seeds": self.control_seeds, "warnings": self.warnings,
                         "rows": [row_document(row) for row in self.rows], "reading": self.reading_text()})

    def tidy(self) -> list[dict]:
        """One row per filter, its error counts as columns."""
        rows = to_plain([row_document(row) for row in self.rows])
        for label, row in zip(self.labels(), rows, strict=True):
            row["filter"] = label
            row.update({f"errors_{k}": v for k, v in row.pop("error_counts").items()})
            row.pop("error_histogram")
            for key in ("control_accuracies", "control_seeds"):
                row.pop(key, None)
        return rows

    def figure(self):
        from interpscope.figures.fourier import error_kinds_figure

        return error_kinds_figure(self.labels(), [r.error_counts for r in self.rows], self.prompts)
