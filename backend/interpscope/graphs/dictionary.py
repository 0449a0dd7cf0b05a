"""What a replacement model's dictionary reads and writes, per layer, whatever its kind.

A set of per-layer transcoders (one per block, ReLU or JumpReLU, with or without a skip connection) and a
cross-layer transcoder (CLT: layer l's features write to the MLP outputs of l and every later block,
interpscope.sae.clt) differ only in where a feature writes. The graph engine, LRP and interventions read them
through `Dictionary`: per SOURCE layer l the encoder (W_enc [d, k], b_enc [k], the activation function) and its
writes, a list of (target layer t, W [k, d]); per TARGET layer the skip connection W_skip [d, d] or None. A per-layer
transcoder writes to its own block only: writes = [(l, W_dec)].
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from interpscope.config import InterpscopeError


@dataclass
class SourceLayer:
    """One source layer: how its features are computed from the MLP input, and where they write."""

    W_enc: torch.Tensor  # [d, k]
    b_enc: torch.Tensor  # [k]
    encode: Callable[[torch.Tensor], torch.Tensor]  # mlp_in [..., d] -> activations [..., k]
    writes: list[tuple[int, torch.Tensor]]  # (target layer, W [k, d])

    @property
    def width(self) -> int:
        return int(self.W_enc.shape[1])


@dataclass
class Dictionary:
    """Every source layer's encoder and writes, and every target layer's skip connection (or None)."""

    layers: list[SourceLayer]
    skips: list[torch.Tensor | None]
    kind: str  # "per-layer transcoders" or "cross-layer transcoder"
    originals: Any  # the transcoders as given (a list, or the CLT)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def cross_layer(self) -> bool:
        return self.kind == "cross-layer transcoder"

    def writes_to(self, target: int) -> list[tuple[int, torch.Tensor]]:
        """(source layer, W [k, d]) of every source layer that writes to `target`."""
        return [(source, W) for source, layer in enumerate(self.layers) for t, W in layer.writes if t == target]

    def written(self, target: int, acts: list[torch.Tensor], mlp_in: torch.Tensor | None = None) -> torch.Tensor:
        """What the features (acts[l] [..., k] per source layer) and the skip write to `target`'s MLP output,
        without the decoder bias."""
        total: torch.Tensor | None = None
        for source, W in self.writes_to(target):
            part = acts[source] @ W
            total = part if total is None else total + part
        skip = self.skips[target]
        if skip is not None and mlp_in is not None:
            total = mlp_in @ skip if total is None else total + mlp_in @ skip
        if total is None:
            raise InterpscopeError(f"Nothing in the dictionary writes to layer {target}.")
        return total


def _is_clt(transcoders: Any) -> bool:
    from interpscope.sae.clt import CrossLayerTranscoder

    return isinstance(transcoders, CrossLayerTranscoder)


def _skip(tc: Any, dtype: torch.dtype) -> torch.Tensor | None:
    W_skip = getattr(tc, "W_skip", None)
    return None if W_skip is None else W_skip.detach().to(dtype)


def dictionary(transcoders: Any, dtype: torch.dtype) -> Dictionary:
    """The dictionary of a transcoder list (one per block), a TranscoderSet or a CrossLayerTranscoder, in dtype."""
    if _is_clt(transcoders):
        clt = transcoders
        if clt.W_enc.dtype != dtype:
            import copy

            clt = copy.deepcopy(clt).to(dtype)
        layers = []
        for source in range(clt.n_layers):
            W_dec = clt.W_dec[source].detach()  # [k, L - source, d]
            layers.append(SourceLayer(clt.W_enc[source].detach(), clt.b_enc[source].detach(),
                                      partial(clt.encode_layer, layer=source),
                                      [(source + j, W_dec[:, j]) for j in range(W_dec.shape[1])]))
        skips = [None if clt.W_skip is None else clt.W_skip[t].detach() for t in range(clt.n_layers)]
        return Dictionary(layers, skips, "cross-layer transcoder", transcoders)
    items = list(getattr(transcoders, "transcoders", transcoders) or [])
    layers, skips = [], []
    for layer, tc in enumerate(items):
        if tc.W_enc.dtype != dtype:
            import copy

            tc = copy.deepcopy(tc).to(dtype)
        layers.append(SourceLayer(tc.W_enc.detach(), tc.b_enc.detach(), tc.encode,
                                  [(layer, tc.W_dec.detach())]))
        skips.append(_skip(tc, dtype))
    return Dictionary(layers, skips, "per-layer transcoders", items)
