"""Which input positions of a relevance map are excluded: the rows MEASURED to carry a massive activation at the middle
block (interpscope.sinks.measure: norm > SINK_FACTOR x the median of the other rows), and a BOS the caller prepended.
They never set a map's colour scale and are named where shown; their relevance is still reported.

`watching(adapter)` reads the middle residual off a forward pass the caller runs anyway (the attribution's own),
so a one-pass method stays one pass; `sink_report` runs a partial pass of its own for the others.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from interpscope.capture import capture, hooks
from interpscope.sinks import SinkReport, measure


def probe_point(adapter) -> str:
    """The residual point the sinks are measured at: the output of the middle block."""
    return f"blocks.{adapter.n_layers // 2}.hook_resid_post"


def report_from(adapter, residual: torch.Tensor, prepended: int | None = None) -> SinkReport:
    """The SinkReport of a residual [T, d] read at probe_point(adapter)."""
    return measure(residual, prepended=prepended, point=probe_point(adapter))


def sink_report(adapter, input_ids: torch.Tensor, prepended: int | None = None) -> SinkReport:
    """The SinkReport of input_ids [1, T] from a partial forward pass up to the middle block."""
    name = probe_point(adapter)
    residual = capture(adapter, input_ids, [name], stop_early=True).activations[name]
    return report_from(adapter, residual.reshape(-1, residual.shape[-1]), prepended)


def sink_positions(adapter, input_ids: torch.Tensor, prepended: int | None = None) -> list[int]:
    """The excluded positions of input_ids [1, T] (measured sinks and a prepended BOS)."""
    return sink_report(adapter, input_ids, prepended).positions


@contextmanager
def watching(adapter) -> Iterator[dict]:
    """Inside the block, the first forward pass of this run leaves its middle residual [T, d] in the yielded
    dict under "residual" (a read hook: nothing is changed)."""
    seen: dict = {}

    def keep(tensor: torch.Tensor) -> None:
        seen.setdefault("residual", tensor[0].detach())

    with hooks(adapter, {probe_point(adapter): keep}, role="read"):
        yield seen
