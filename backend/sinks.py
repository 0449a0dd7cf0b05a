"""Attention sinks and massive activations: the positions no view ranks, averages or scales a colour by.

Position 0 of every context is one (the attention sink). Models also put the sink's massive activation on later
positions now and then: SmolLM2 on position 1 after some first tokens (5 of the 297,561 cached training rows) and on
every repeat of a repeated first token ("000 l., ..." gives three sinks at ~140x the median norm at layer 15).
A row is *massive* when its residual-stream norm exceeds SINK_FACTOR x the median row norm of the rows given.

This module is the one place that says which positions are excluded. Every view uses it:
- SAEs (training, evaluation, stores, prompt view, steering) read `sink_rows` on the hook activation itself;
- neuron views (statistics, histograms, top contexts, per-prompt activations) read `excluded_mask` on the residual
  stream at `detection_point(adapter, layer)`: the massive activation is largest in the middle of the network
  (SmolLM2: ~130x the median at layer 15, but only ~10x at the input of the last layer), so a neuron of layer L is
  checked at the input of block min(L, n_layers // 2).
Views return which positions they excluded (`excluded_positions`) so a page can name them.
"""
from __future__ import annotations

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


def excluded_mask(resid: torch.Tensor, factor: float = SINK_FACTOR) -> torch.Tensor:
    """Bool mask [B, T] (or [T] for a [T, d] input) of the positions no view may rank, average or scale by:
    position 0 of every row, and every later position whose residual row is massive (median over positions 1..
    of all rows given, as in `sink_rows`)."""
    single = resid.dim() == 2
    batch = resid[None] if single else resid
    mask = torch.zeros(batch.shape[:2], dtype=torch.bool, device=batch.device)
    mask[:, 0] = True
    if batch.shape[1] > 1:
        mask[:, 1:] = sink_rows(batch[:, 1:], factor)
    return mask[0] if single else mask


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
