"""Explain an image classifier's class logit: the typed result (schema interpscope.image_relevance) and the call
that pages, the command line and the Python API share."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.images import model_pixels
from interpscope.models.vision import LoadedImageModel
from interpscope.progress import Progress
from interpscope.relevance.engine import Completeness, Conservation
from interpscope.relevance.image import (
    IG_STEPS,
    REFERENCES,
    attribute_pixels,
    check_class,
    class_logits,
    get_image_method,
    patch_sums,
)
from interpscope.results import Result

TOP = 5


@dataclass
class ClassScore:
    """One class's logit and probability (softmax over all classes)."""

    index: int
    label: str
    logit: float
    prob: float


@dataclass
class ImageRelevance(Result):
    """One relevance map over an image (schema interpscope.image_relevance): relevance per pixel (summed over the
    colour channels, in the model's input resolution) and per patch (the sum over each patch) for one target class,
    the explained logit (the unpatched model's), the conservation readout of LRP methods (input + biases + softmax =
    logit; the biases include the class token and the position embeddings) or IG's completeness, and the model's top
    classes. image_size is the model's input [height, width]; source_size the given image's, before resizing.
    `reference` (what IG starts from, what occlusion swaps in) is absent for methods without one."""

    SCHEMA = "interpscope.image_relevance"
    SCHEMA_VERSION = 1

    model: str
    method: str
    method_label: str
    law: str
    through_softmax: bool
    target_class: int
    target_label: str
    predicted_class: int
    predicted_label: str
    logit: float
    top: list[ClassScore]
    image_size: list[int]
    source_size: list[int]
    channels: int
    patch_size: int
    grid: list[int]
    image_sha256: str
    pixel_relevance: np.ndarray
    patch_relevance: np.ndarray
    seconds: float
    conservation: Conservation | None = None
    completeness: Completeness | None = None
    reference: str | None = None
    reference_label: str | None = None

    @property
    def title(self) -> str:
        return f"{self.method_label} relevance for {self.target_label!r} (class {self.target_class}), {self.model}"

    def tidy(self) -> list[dict]:
        """One row per patch (row-major, the model's patch order): its place and relevance."""
        cols = self.grid[1]
        return [{"patch": index, "row": index // cols, "col": index % cols, "relevance": float(value)}
                for index, value in enumerate(np.asarray(self.patch_relevance).ravel())]

    def figure(self):
        """The pixel heatmap with the patch grid (signed colours, one scale centred on zero)."""
        from interpscope.figures.relevance.images import relevance_figure

        return relevance_figure(None, np.asarray(self.pixel_relevance), self.patch_size, self.title)


def image_digest(image: np.ndarray) -> str:
    """sha256 of the decoded pixels (uint8 [H, W, 3]): which image a document explains."""
    return hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest()


def explain_image(lm: LoadedImageModel, image: np.ndarray, method: str = "attnlrp", *,
                  target_class: int | None = None, reference: str = "mean", ig_steps: int = IG_STEPS,
                  progress: Progress | None = None) -> ImageRelevance:
    """Relevance of every pixel and patch of `image` (uint8 [H, W, 3], interpscope.images.decode_image) for the
    logit of `target_class` (default: the predicted class) with `method` (image_methods(): attnlrp, cplrp,
    gradxinput, ig, occlusion). `reference` (mean, zero, black) is what IG starts from and occlusion swaps in."""
    chosen = get_image_method(method)
    if reference not in REFERENCES:
        raise InterpscopeError(f"Unknown reference {reference!r}. Choose one of: {', '.join(REFERENCES)}.")
    adapter = lm.adapter
    pixels = model_pixels(image, lm.preprocessing).to(device=lm.device, dtype=lm.dtype)
    start = time.perf_counter()
    logits = class_logits(adapter, pixels)[0].double().cpu().numpy()
    predicted = int(np.argmax(logits))
    target = predicted if target_class is None else check_class(adapter, target_class)
    attribution = attribute_pixels(adapter, pixels, target, chosen.name, lm.preprocessing, reference=reference,
                                   ig_steps=ig_steps, progress=progress)
    seconds = time.perf_counter() - start
    pixel_map = attribution.relevance.sum(axis=0)
    shifted = np.exp(logits - logits.max())
    probs = shifted / shifted.sum()
    top = [ClassScore(int(i), lm.label(int(i)), float(logits[i]), float(probs[i]))
           for i in np.argsort(-logits, kind="stable")[:TOP]]
    height, width = adapter.image_size
    return ImageRelevance(
        model=lm.name, method=chosen.name, method_label=chosen.label, law=chosen.law,
        through_softmax=chosen.through_softmax, target_class=target, target_label=lm.label(target),
        predicted_class=predicted, predicted_label=lm.label(predicted), logit=attribution.logit, top=top,
        image_size=[height, width], source_size=[int(image.shape[0]), int(image.shape[1])],
        channels=adapter.n_channels, patch_size=adapter.patch_size,
        grid=list(adapter.grid), image_sha256=image_digest(image), pixel_relevance=pixel_map,
        patch_relevance=patch_sums(adapter, pixel_map), seconds=seconds, conservation=attribution.conservation,
        completeness=attribution.completeness, reference=reference if chosen.uses_reference else None,
        reference_label=REFERENCES[reference] if chosen.uses_reference else None)
