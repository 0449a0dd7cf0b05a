"""Which input positions of a relevance map are attention sinks: position 0, and any later position whose residual
stream carries a massive activation (backend.sae.sinks.sink_rows at the middle layer). They never set a map's
colour scale and are named where shown; their relevance is still reported."""
from __future__ import annotations

import torch

from backend.capture import capture
from backend.sae.sinks import sink_rows


def sink_positions(adapter, input_ids: torch.Tensor) -> list[int]:
    """[0] plus the positions >= 1 of input_ids [1, T] with a massive residual norm at the middle block."""
    if input_ids.shape[1] < 3:
        return [0]
    name = f"blocks.{adapter.n_layers // 2}.hook_resid_post"
    residual = capture(adapter, input_ids, [name], stop_early=True).activations[name]
    later = torch.nonzero(sink_rows(residual[1:])).flatten()
    return [0] + [int(i) + 1 for i in later]
