"""Vision transformers: ViT and DeiT image classifiers (Hugging Face ViTForImageClassification and
DeiTForImageClassification).

The image is cut into patches by a strided convolution (the patch embedding), a learned class token (and DeiT's
distillation token) is put first, learned position embeddings are added, then pre-norm blocks (LayerNorm, attention
with separate q/k/v projections, LayerNorm, GELU MLP) and a final LayerNorm; the classifier reads the class token.
The class token, the distillation token and the position embeddings are parameters added to the stream, not inputs:
relevance booked on them is counted with the biases (additive_embeddings).
"""
from __future__ import annotations

from typing import Any

from torch import nn

from interpscope.adapters.base import LAYERNORM, ModelAdapter, weight_of
from interpscope.adapters.layout import VIT
from interpscope.config import InterpscopeError


class ViTAdapter(ModelAdapter):
    family = "vit"
    norm = LAYERNORM
    model_types: tuple[str, ...] = ("vit", "deit")
    modality = "image"
    layout = VIT

    def __init__(self, model: nn.Module):
        super().__init__(model)
        if not isinstance(getattr(model, "classifier", None), nn.Linear):
            raise InterpscopeError(f"{type(model).__name__} has no single linear classifier on the class token: "
                                   "Interpscope explains ViT/DeiT image classifiers (ForImageClassification).")

    def _core(self) -> Any:
        return getattr(self.model, self.model.base_model_prefix)

    # --- sizes -----------------------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def n_labels(self) -> int:
        return int(weight_of(self.unembedding()).shape[0])

    @property
    def image_size(self) -> tuple[int, int]:
        size = self.config.image_size
        return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))

    @property
    def patch_size(self) -> int:
        size = self.config.patch_size
        return int(size) if isinstance(size, int) else int(size[0])

    @property
    def n_channels(self) -> int:
        return int(self.config.num_channels)

    @property
    def grid(self) -> tuple[int, int]:
        """Patches per column and per row."""
        height, width = self.image_size
        return height // self.patch_size, width // self.patch_size

    @property
    def n_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, and DeiT's distillation token."""
        return 1 + int(getattr(self._core().embeddings, "distillation_token", None) is not None)

    # --- modules ---------------------------------------------------------------------------------------
    def embedding(self) -> nn.Embedding:
        raise InterpscopeError("A vision transformer has no token embedding: its input is the patch embedding.")

    def patch_embedding(self) -> nn.Conv2d:
        """The convolution that turns each patch into a vector (kernel = stride = patch size)."""
        return self._core().embeddings.patch_embeddings.projection

    def additive_embeddings(self) -> list[nn.Parameter]:
        """Parameters added to the stream that no input produces: class token, distillation token, positions."""
        embeddings = self._core().embeddings
        names = ("cls_token", "distillation_token", "position_embeddings")
        return [param for name in names if isinstance(param := getattr(embeddings, name, None), nn.Parameter)]

    def hook_points(self) -> list[str]:
        """The block and norm points (no token or position embedding module: both are parameters here)."""
        return [name for name in super().hook_points() if name not in ("hook_embed", "hook_pos_embed")]

    def describe(self) -> dict:
        height, width = self.image_size
        return {"family": self.family, "modality": self.modality, "layers": self.n_layers, "d_model": self.d_model,
                "heads": self.n_heads, "d_mlp": self.d_mlp, "classes": self.n_labels,
                "image": f"{height}x{width}x{self.n_channels}", "patch": self.patch_size, "norm": self.norm.kind}
