"""A transcoder set as an object, and its names: here so that readers of other layouts
(interpscope.sae.formats.circuit_tracer) build one without importing interpscope.sae.transcoder_set, which reads
them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope.config import InterpscopeError
from interpscope.sae.arch.transcoder import Transcoder
from interpscope.sae.folder import hook_width

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MANIFEST = "manifest.json"
HOOK_IN = "blocks.{layer}.mlp.hook_in"
HOOK_OUT = "blocks.{layer}.hook_mlp_out"
TRANSCODERS_DIR = "transcoders"


def layer_folder_name(layer: int) -> str:
    return f"layer_{layer:02d}"


@dataclass
class TranscoderSet:
    """One transcoder per block (index = block), all mapping hook_in(L) -> hook_out(L)."""

    model_name: str
    transcoders: list[Transcoder]  # index = block
    hook_in: str = HOOK_IN
    hook_out: str = HOOK_OUT
    folder: Path | None = None
    manifest: dict = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return len(self.transcoders)

    @property
    def width(self) -> int:
        return int(self.transcoders[0].cfg.d_sae) if self.transcoders else 0

    def hook_in_name(self, layer: int) -> str:
        return self.hook_in.format(layer=layer)

    def hook_out_name(self, layer: int) -> str:
        return self.hook_out.format(layer=layer)

    def __getitem__(self, layer: int) -> Transcoder:
        return self.transcoders[layer]

    def check_model(self, lm: LoadedModel) -> None:
        """Clear errors unless this set fits the model: one transcoder per block, widths equal to the hooks'."""
        adapter = lm.adapter
        if adapter.n_layers != self.n_layers:
            raise InterpscopeError(f"The transcoder set has {self.n_layers} layers but {lm.name} has "
                                   f"{adapter.n_layers} blocks.")
        for layer, tc in enumerate(self.transcoders):
            d_in = hook_width(adapter, self.hook_in_name(layer))
            d_out = hook_width(adapter, self.hook_out_name(layer))
            if (tc.cfg.d_in, tc.d_out) != (d_in, d_out):
                raise InterpscopeError(f"Shape mismatch at layer {layer}: the transcoder maps {tc.cfg.d_in} -> "
                                       f"{tc.d_out}, but {lm.name} has {d_in} -> {d_out} there.")
