"""Attention sinks and massive activations: the positions no view ranks, averages or scales a colour by.

A position is a sink only when it is MEASURED to be one, never because of where it is: its residual-stream norm at
the middle of the network is more than SINK_FACTOR x the median norm of the other rows of the same input
(`measure`). Most models put such a massive activation on their first token (SmolLM2: ~130x the median at layer 15,
whatever the first word is; Gemma 3's `<bos>`: ~13x) and now and then on later ones ("000 l., ..." gives three sinks
in SmolLM2). Where the tokenizer adds no BOS, the pages and the command line can prepend the model's BOS token
(interpscope.inputs.with_bos) so that the sink lands on it and the first word is explained like any other; a prepended
token is excluded too and named as such.

This module is the one place that says which positions are excluded. Every view uses it:
- relevance maps, information flow and the CLI's explain read `measure` on the middle residual of their own pass
  (interpscope.relevance.sinks);
- SAEs (training, evaluation, stores, prompt view, steering) read `sink_rows` on the hook activation itself;
- neuron views (statistics, histograms, top contexts, per-prompt activations) read `excluded_mask` on the residual
  stream at `detection_point(adapter, layer)`: the massive activation is largest in the middle of the network
  (SmolLM2: ~130x the median at layer 15, but only ~10x at the input of the last layer), so a neuron of layer L is
  checked at the input of block min(L, n_layers // 2).
Views return which positions they excluded, and why (`SinkReport`), so a page can name them; `words(capabilities)`
gives the model-kind wording (a Mamba model has no attention, so no attention sink).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

SINK_FACTOR = 10.0


def sink_rows(x: torch.Tensor, factor: float = SINK_FACTOR) -> torch.Tensor:
    """Bool mask over the rows of x [..., d]: True where a row's norm exceeds `factor` x the median row norm of x.

    The median is taken over every row given, so pass the rows of one batch without position 0."""
    norms = x.detach().float().norm(dim=-1)
    if norms.numel() == 0:
        return torch.zeros(norms.shape, dtype=torch.bool, device=x.device)
    return norms > factor * norms.flatten().median()


def zero_sink_features(x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """features [B, T, d_sae] of activations x [B, T, d] with every sink position from 1 on set to zero (in
    place; position 0 is the caller's business); returns the mask [B, T - 1] of the positions 1.. that were sinks."""
    mask = sink_rows(x[:, 1:])
    features[:, 1:][mask.to(features.device)] = 0.0
    return mask


def others_median_ratio(resid: torch.Tensor) -> torch.Tensor:
    """[..., T] ratio of each row's norm to the median norm of the OTHER rows of its sequence (resid [..., T, d]);
    NaN where a sequence has a single row (nothing to compare with)."""
    norms = resid.detach().float().norm(dim=-1)
    n = norms.shape[-1]
    if n < 2:
        return torch.full_like(norms, float("nan"))
    ordered, order = norms.sort(dim=-1)
    rank = order.argsort(dim=-1)
    k = (n - 2) // 2  # lower median of the n - 1 other rows, as torch.median
    below = ordered[..., k].unsqueeze(-1).expand_as(norms)
    above = ordered[..., k + 1].unsqueeze(-1).expand_as(norms)
    median = torch.where(rank > k, below, above)
    return norms / median.clamp_min(torch.finfo(norms.dtype).tiny)


def excluded_mask(resid: torch.Tensor, factor: float = SINK_FACTOR, window_start: bool = True) -> torch.Tensor:
    """Bool mask [B, T] (or [T] for a [T, d] input) of the positions no view may rank, average or scale by: every
    position whose residual row is more than `factor` x the median norm of the other rows of its sequence.

    window_start: for windows cut out of a corpus (neuron stores), whose first position is not a first word but
    where the cut made the model put its sink (SmolLM2 measures ~130x there at every window): position 0 is
    excluded and the later rows are compared with the median over positions 1.. of every window given (as the
    shipped stores were built). A user's own text passes False: each row against the median of the other rows of
    its sequence, so its first word is excluded only when measured."""
    single = resid.dim() == 2
    batch = resid[None] if single else resid
    if window_start:
        mask = torch.zeros(batch.shape[:2], dtype=torch.bool, device=batch.device)
        mask[:, 0] = True
        if batch.shape[1] > 1:
            mask[:, 1:] = sink_rows(batch[:, 1:], factor)
    else:
        mask = others_median_ratio(batch) > factor
    return mask[0] if single else mask


@dataclass(frozen=True)
class SinkReport:
    """Which positions of one input are excluded, and why: `measured` maps a position to its measured ratio (norm /
    median norm of the other rows at `point`); `prepended` is the position of a BOS token put there by the caller
    (shown, named, never ranked), or None. `ratios` holds every position's ratio (NaN for a one-token input)."""

    measured: dict[int, float]
    prepended: int | None = None
    point: str = ""
    factor: float = SINK_FACTOR
    ratios: list[float] = field(default_factory=list)

    @property
    def positions(self) -> list[int]:
        """Every excluded position, in order."""
        extra = [] if self.prepended is None else [self.prepended]
        return sorted(set(self.measured) | set(extra))

    def why(self, position: int, sink_word: str = "attention sink") -> str:
        """'prepended BOS', 'measured <sink_word>, 130x the median norm', or both, for an excluded position."""
        parts = ["prepended BOS"] if position == self.prepended else []
        if position in self.measured:
            parts.append(f"measured {sink_word}, {self.measured[position]:.0f}x the median norm")
        return "; ".join(parts)

    def rows(self, tokens: list[str], sink_word: str = "attention sink") -> list[dict]:
        """One plain dict per excluded position: position, token, prepended, measured ratio (absent when not
        measured as a sink), reason (what a page and the CLI's --json say)."""
        out = []
        for position in self.positions:
            row = {"position": position, "token": tokens[position] if position < len(tokens) else "",
                   "prepended": position == self.prepended, "reason": self.why(position, sink_word)}
            if position in self.measured:
                row["ratio"] = self.measured[position]
            out.append(row)
        return out


def measure(resid: torch.Tensor, prepended: int | None = None, point: str = "",
            factor: float = SINK_FACTOR) -> SinkReport:
    """The SinkReport of one input's residual [T, d] (or [1, T, d]) at `point`."""
    ratios = others_median_ratio(resid.reshape(-1, resid.shape[-1]))
    measured = {int(i): float(ratios[i]) for i in torch.nonzero(ratios > factor).flatten()}
    return SinkReport(measured=measured, prepended=prepended, point=point, factor=factor,
                      ratios=[float(r) for r in ratios])


def words(capabilities: Iterable[str]) -> dict[str, str]:
    """Model-kind wording from an adapter's capabilities: 'sink' (what an excluded massive row is called: an
    attention sink only where there is attention) and 'bias_extra' (' and position embeddings' only where there are
    position embeddings)."""
    found = set(capabilities)
    return {"sink": "attention sink" if "attention" in found else "massive-activation row",
            "bias_extra": " (and position embeddings)" if "position_embedding" in found else ""}


def detection_point(adapter, layer: int) -> str:
    """The residual-stream hook point whose massive rows mark the sinks for a quantity read in block `layer`."""
    return f"blocks.{max(0, min(int(layer), adapter.n_layers // 2))}.hook_resid_pre"


def excluded_positions(mask: np.ndarray | torch.Tensor) -> list[int]:
    """The excluded positions of one sequence's mask [T], as plain ints (what a page names)."""
    return [int(i) for i in np.flatnonzero(np.asarray(mask))]


def kept(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The values [..] at positions not excluded by mask (same shape as values' leading dims), flattened."""
    return np.asarray(values)[~np.asarray(mask, dtype=bool)]


def colour_scale(values: np.ndarray, mask: np.ndarray) -> float:
    """max |value| over the positions a colour scale may use (0.0 when none is left)."""
    rest = kept(values, mask)
    return float(np.abs(rest).max()) if rest.size else 0.0


def top_positions(values: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k largest values among the positions not excluded, largest first (stable order)."""
    flat = np.asarray(values, dtype=np.float64).ravel().copy()
    flat[np.asarray(mask, dtype=bool).ravel()] = -np.inf
    candidates = np.flatnonzero(np.isfinite(flat))
    if candidates.size == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    take = min(k, candidates.size)
    part = candidates[np.argpartition(-flat[candidates], take - 1)[:take]]
    return part[np.lexsort((part, -flat[part]))]
