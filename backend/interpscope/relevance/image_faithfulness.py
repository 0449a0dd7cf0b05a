"""Faithfulness of image relevance maps: patch flipping (schema interpscope.image_faithfulness).

As in the AttnLRP paper's image experiments: patches are removed most relevant first (each method's patch relevance
orders them) and the target class logit is tracked after each removal; a faithful map drops it fast, so the area
under the curve (over the removed fraction, 0 to 1) is small. Removing a patch sets its pixels to the reference
(default: the image's mean value per channel; interpscope.relevance.image.REFERENCES). The control is the same curve
for random patch orders (several seeded orders: their mean curve, its spread and the AUC of each).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.images import model_pixels
from interpscope.models.vision import LoadedImageModel
from interpscope.progress import Progress
from interpscope.relevance.faithfulness import removal_counts
from interpscope.relevance.image import IMAGES_PER_BATCH, REFERENCES, class_logits, patch_masks, reference_input
from interpscope.relevance.image_api import ImageRelevance, image_digest
from interpscope.results import Result

RANDOM_ORDERS = 8
MAX_POINTS = 50  # at most this many removal counts per curve (every count for up to 49 patches)


@dataclass
class FlipCurve:
    """The target logit after removing the `counts` most relevant patches of one method's map, and its AUC."""

    method: str
    method_label: str
    values: np.ndarray
    auc: float


@dataclass
class RandomControl:
    """The same curve for `orders` random patch orders (seeded): mean and standard deviation per point, each
    order's AUC, their mean and standard deviation."""

    orders: int
    seed: int
    mean: np.ndarray
    std: np.ndarray
    aucs: list[float]
    auc_mean: float
    auc_std: float


def _auc(fractions: np.ndarray, values: np.ndarray) -> float:
    return float(np.sum(np.diff(fractions) * (values[1:] + values[:-1]) / 2))


@dataclass
class ImageFaithfulness(Result):
    """Patch-flipping curves of several maps of one image and class, beside the random-order control."""

    SCHEMA = "interpscope.image_faithfulness"
    SCHEMA_VERSION = 1

    model: str
    target_class: int
    target_label: str
    image_sha256: str
    order: str
    reference: str
    reference_label: str
    n_patches: int
    counts: list[int]
    fractions: np.ndarray
    logit: float
    curves: list[FlipCurve]
    random: RandomControl
    seconds: float

    def reading(self) -> str:
        """One sentence from the numbers: which map drops the logit fastest, and how the random control compares."""
        best = min(self.curves, key=lambda c: c.auc)
        beaten = [c.method_label for c in self.curves if c.auc < self.random.auc_mean - self.random.auc_std]
        control = f"random orders {self.random.auc_mean:.3g} ± {self.random.auc_std:.3g} ({self.random.orders} orders)"
        if not beaten:
            return (f"No map removes the evidence faster than random patches: lowest AUC {best.method_label} "
                    f"{best.auc:.3g} vs {control}.")
        rest = [label for label in beaten if label != best.method_label]
        also = f"; also below the random band: {', '.join(rest)}" if rest else ""
        return (f"Removing patches in {best.method_label}'s order drops the {self.target_label!r} logit fastest "
                f"(AUC {best.auc:.3g}, lower is better) vs {control}{also}.")

    def tidy(self) -> list[dict]:
        """One row per (method or random mean, removal count)."""
        rows = []
        for curve in [*self.curves, FlipCurve("random", "Random order (mean)", self.random.mean, self.random.auc_mean)]:
            rows += [{"method": curve.method, "patches_removed": count, "fraction": float(fraction),
                      "logit": float(value)}
                     for count, fraction, value in zip(self.counts, self.fractions, curve.values, strict=True)]
        return rows

    def figure(self):
        from interpscope.figures.relevance.images import flipping_figure

        return flipping_figure(self)


def _curve(masks: torch.Tensor, pixels: torch.Tensor, reference: torch.Tensor, order: np.ndarray,
           counts: Sequence[int], adapter, target: int) -> np.ndarray:
    """The target logit after setting the first `count` patches of `order` to the reference, for each count."""
    batch = []
    for count in counts:
        removed = masks[torch.as_tensor(order[:count], dtype=torch.long)].any(0) if count else \
            torch.zeros_like(masks[0])
        batch.append(torch.where(removed, reference[0], pixels[0]))
    values = [class_logits(adapter, torch.stack(batch[i:i + IMAGES_PER_BATCH]))[:, target].double().cpu()
              for i in range(0, len(batch), IMAGES_PER_BATCH)]
    return torch.cat(values).numpy()


def patch_flipping(lm: LoadedImageModel, image: np.ndarray, maps: Sequence[ImageRelevance], *,
                   reference: str = "mean", random_orders: int = RANDOM_ORDERS, seed: int = 0,
                   progress: Progress | None = None) -> ImageFaithfulness:
    """Patch-flipping curves (most relevant first) of `maps` (one image, one target class) and the random control."""
    if not maps:
        raise InterpscopeError("Patch flipping needs at least one relevance map.")
    if reference not in REFERENCES:
        raise InterpscopeError(f"Unknown reference {reference!r}. Choose one of: {', '.join(REFERENCES)}.")
    if not 1 <= random_orders <= 100:
        raise InterpscopeError(f"Random orders must be 1-100, not {random_orders}.")
    digest, target = image_digest(image), maps[0].target_class
    if any(m.image_sha256 != digest or m.target_class != target or m.model != lm.name for m in maps):
        raise InterpscopeError("Every map must explain this image's same class with this model.")
    adapter = lm.adapter
    start = time.perf_counter()
    pixels = model_pixels(image, lm.preprocessing).to(device=lm.device, dtype=lm.dtype)
    ref = reference_input(pixels, reference, lm.preprocessing)
    masks = patch_masks(adapter, pixels.device)
    n_patches = len(masks)
    counts = removal_counts(n_patches, min(n_patches, MAX_POINTS - 1))
    fractions = np.array(counts, dtype=np.float64) / n_patches
    total, done = len(maps) + random_orders, 0
    curves = []
    with model_lock(adapter.model):
        for relevance in maps:
            order = np.argsort(-np.asarray(relevance.patch_relevance).ravel(), kind="stable")
            values = _curve(masks, pixels, ref, order, counts, adapter, target)
            curves.append(FlipCurve(relevance.method, relevance.method_label, values, _auc(fractions, values)))
            done += 1
            if progress is not None:
                progress(done, total)
        generator = np.random.default_rng(seed)
        randoms = []
        for _ in range(random_orders):
            randoms.append(_curve(masks, pixels, ref, generator.permutation(n_patches), counts, adapter, target))
            done += 1
            if progress is not None:
                progress(done, total)
    stacked = np.stack(randoms)
    aucs = [_auc(fractions, values) for values in stacked]
    control = RandomControl(orders=random_orders, seed=seed, mean=stacked.mean(0), std=stacked.std(0), aucs=aucs,
                            auc_mean=float(np.mean(aucs)), auc_std=float(np.std(aucs)))
    return ImageFaithfulness(model=lm.name, target_class=target, target_label=maps[0].target_label,
                             image_sha256=digest, order="most relevant patch first", reference=reference,
                             reference_label=REFERENCES[reference], n_patches=n_patches, counts=counts,
                             fractions=fractions, logit=float(curves[0].values[0]), curves=curves, random=control,
                             seconds=time.perf_counter() - start)
