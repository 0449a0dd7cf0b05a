"""Which input positions of a relevance map are attention sinks: position 0, and any later position whose residual
stream carries a massive activation (backend.sinks.sink_rows at the middle layer). They never set a map's colour
scale and are named where shown; their relevance is still reported.

`watching(adapter)` reads the middle residual off a forward pass the caller runs anyway (the attribution's own),
so a one-pass method stays one pass; `sink_positions` runs a partial pass of its own for the others.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from backend.capture import capture, hooks
from backend.sinks import sink_rows


def probe_point(adapter) -> str:
    return f"blocks.{adapter.n_layers // 2}.hook_resid_post"


def positions_from(residual: torch.Tensor) -> list[int]:
    """[0] plus the rows >= 1 of a residual [T, d] with a massive norm."""
    if residual.shape[0] < 3:
        return [0]
    later = torch.nonzero(sink_rows(residual[1:].detach())).flatten()
    return [0] + [int(i) + 1 for i in later]


def sink_positions(adapter, input_ids: torch.Tensor) -> list[int]:
    """[0] plus the positions >= 1 of input_ids [1, T] with a massive residual norm at the middle block."""
    name = probe_point(adapter)
    return positions_from(capture(adapter, input_ids, [name], stop_early=True).activations[name])


@contextmanager
def watching(adapter) -> Iterator[dict]:
    """Inside the block, the first forward pass of this run leaves its middle residual [T, d] in the yielded
    dict under "residual" (a read hook: nothing is changed)."""
    seen: dict = {}

    def keep(tensor: torch.Tensor) -> None:
        seen.setdefault("residual", tensor[0].detach())

    with hooks(adapter, {probe_point(adapter): keep}, role="read"):
        yield seen
