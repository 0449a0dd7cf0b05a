"""Progress callbacks: the two shapes backend calls use, and an ETA for a page's progress bar.

- Counting calls take `progress(done: int, total: int)`: integrated gradients (per internal batch of steps), SAE
  evaluation (per batch of windows), steering and generation (per generated token), continuation relevance (per
  explained token), hidden-state spectra (per batch of numbers), the entropy-neuron store build (per layer),
  faithfulness over many texts (per text).
- Staged calls take `progress(fraction: float, text: str)`: the neuron corpus pass, ablation and induction
  (several stages share one bar) and the Fourier filter table. The SAE feature-store build takes
  `progress(stage: str, done: int, total: int)`.
`with_eta` turns a counting callback into one that also gets the seconds left, from the pace so far.
"""
from __future__ import annotations

import time
from collections.abc import Callable

Progress = Callable[[int, int], None]
StageProgress = Callable[[float, str], None]


def with_eta(report: Callable[[int, int, float | None], None]) -> Progress:
    """A `progress(done, total)` that calls report(done, total, seconds_left); seconds_left is None until the
    first step is done, then (elapsed / done) * (total - done)."""
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        left = None
        if done > 0:
            left = (time.perf_counter() - started) / done * max(total - done, 0)
        report(done, total, left)
    return progress
