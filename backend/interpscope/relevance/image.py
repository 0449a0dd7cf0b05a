"""Relevance of an image classifier's class logit over the input pixels: AttnLRP, CP-LRP and the baselines.

AttnLRP and CP-LRP use the text engine's rule sets unchanged (interpscope.relevance.rules: LayerNorm identity rule,
GELU identity rule, uniform rule on q.k and attention x value: q/k x 1/4 and v x 1/2 for AttnLRP, q/k detached for
CP-LRP) on a ViT/DeiT through its adapter. Relevance at a pixel is pixel x modified gradient in the model's input
scale (after the preprocessor's normalisation), summed over the colour channels; a patch's relevance is the sum over
its pixels. The conservation readout books what the text engine books: the input sum, the biases (here also the
class token, DeiT's distillation token and the position embeddings: parameters added to the stream) and, for AttnLRP,
what each layer's softmax drops; explained = input + biases + softmax = the class logit (CP-LRP: softmax 0).

Baselines on the same target: Gradient x Input (no rules), captum Integrated Gradients from a reference image, and
occlusion of patches (each patch set to the reference in turn: the logit's drop, spread evenly over its pixels).
The reference is the image's mean value per channel by default (REFERENCES).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters.vit import ViTAdapter
from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.models.vision import Preprocessing
from interpscope.progress import Progress
from interpscope.relevance.engine import Completeness, Conservation, _bias_grads, _relevance, _Taps, bias_parameters
from interpscope.relevance.methods import methods_serving
from interpscope.relevance.rules import Rule, applied

REFERENCES = {"mean": "the image's mean value per channel", "zero": "zero model input (the preprocessor's mean "
              "colour)", "black": "black pixels"}
IG_STEPS = 32
IMAGES_PER_BATCH = 64


@dataclass(frozen=True)
class ImageMethod:
    """One way to explain a class logit over pixels: a registered method (interpscope.relevance.methods) that serves
    images, seen from the image side. law: 'conservation' (LRP), 'completeness' (IG) or 'none'."""

    name: str
    label: str
    kind: str
    law: str
    description: str
    compute: Callable[..., PixelAttribution]
    rules: Callable[[ViTAdapter], Sequence[Rule]] | None = None
    through_softmax: bool = False
    uses_reference: bool = False


def image_methods() -> dict[str, ImageMethod]:
    """The registered methods that serve images, by name, in registration order (LRP first)."""
    found = {}
    for method in methods_serving("image"):
        image = method.image
        assert image is not None  # register_method: a method serves images exactly when it says how
        found[method.name] = ImageMethod(method.name, image.label or method.label, method.kind, method.law,
                                         image.description, image.compute, method.rules, method.through_softmax,
                                         image.uses_reference)
    return found


def get_image_method(name: str) -> ImageMethod:
    methods = image_methods()
    method = methods.get((name or "").strip().lower())
    if method is None:
        raise InterpscopeError(f"Unknown method {name!r} for images. Choose one of: {', '.join(methods)}.")
    return method


def reference_input(pixels: torch.Tensor, kind: str, preprocessing: Preprocessing) -> torch.Tensor:
    """The reference image [1, C, H, W] in the model's input scale (REFERENCES)."""
    if kind == "mean":
        return pixels.mean(dim=(2, 3), keepdim=True).expand_as(pixels).clone()
    if kind == "zero":
        return torch.zeros_like(pixels)
    if kind == "black":
        black = preprocessing.to_input(torch.zeros(pixels.shape[1], 1, 1, dtype=pixels.dtype))
        return black.to(pixels.device)[None].expand_as(pixels).clone()
    raise InterpscopeError(f"Unknown reference {kind!r}. Choose one of: {', '.join(REFERENCES)}.")


@dataclass
class PixelAttribution:
    """Relevance per input value [C, H, W] for one class, the explained logit, all logits and the readouts."""

    relevance: np.ndarray
    logit: float
    logits: np.ndarray
    conservation: Conservation | None = None
    completeness: Completeness | None = None


def check_class(adapter: ViTAdapter, target: int) -> int:
    if not 0 <= int(target) < adapter.n_labels:
        raise InterpscopeError(f"Target class {target} is out of range: this model has {adapter.n_labels} classes "
                               f"(0-{adapter.n_labels - 1}).")
    return int(target)


def class_logits(adapter: ViTAdapter, pixels: torch.Tensor) -> torch.Tensor:
    """The unpatched model's logits [B, classes] (no rules, no graph)."""
    with torch.no_grad():
        return adapter.model(pixel_values=pixels).logits


def rule_attribution(adapter: ViTAdapter, pixels: torch.Tensor, target: int, rules: Sequence[Rule],
                     conservation: bool = True) -> PixelAttribution:
    """One forward and one backward pass under `rules` ([] = plain Gradient x Input); the caller holds the lock.

    Taps the attention heads' outputs and the q/k/v projections (what each softmax drops is the heads' relevance
    minus what reaches q, k and v), and books every bias and additive embedding's b x grad_b."""
    model = adapter.model
    taps = _Taps()
    biases = [*bias_parameters(model), *adapter.additive_embeddings()] if conservation else []
    with ExitStack() as stack, torch.enable_grad():
        stack.enter_context(applied(adapter, rules))
        stack.callback(taps.remove)
        stack.enter_context(_bias_grads(biases))
        if conservation:
            for layer in range(adapter.n_layers):
                out_proj = adapter.attention_out_proj(layer)
                assert out_proj is not None  # a ViT's layout names every block's o_proj
                taps.input(out_proj, f"heads.{layer}")
                for i, (module, _) in enumerate(adapter.attention_qkv(layer)):
                    taps.output(module, f"qkv.{layer}.{i}")
        leaf = pixels.detach().requires_grad_(True)
        logits = model(pixel_values=leaf).logits[0]
        value = logits[target]
        names = list(taps.tensors)
        grads = torch.autograd.grad(value, [leaf, *(taps.tensors[n] for n in names), *biases], allow_unused=True)
    y = float(value.detach().double())
    relevance = _relevance(leaf, grads[0])[0]
    result = PixelAttribution(relevance=relevance.cpu().numpy(), logit=y, logits=logits.detach().double().cpu().numpy())
    if conservation:
        per_tensor = {n: _relevance(taps.tensors[n], g) for n, g in zip(names, grads[1:1 + len(names)], strict=True)}
        bias_total = float(sum(float(_relevance(b, g).sum()) for b, g in zip(biases, grads[1 + len(names):],
                                                                               strict=True)))
        softmax = [float(per_tensor[f"heads.{layer}"].sum()) - sum(
            float(t.sum()) for n, t in per_tensor.items() if n.startswith(f"qkv.{layer}."))
            for layer in range(adapter.n_layers)]
        input_sum = float(relevance.sum())
        scale = abs(y) if y != 0 else 1.0
        result.conservation = Conservation(
            target_logit=y, input_sum=input_sum, bias_sum=bias_total, softmax_sum=float(sum(softmax)),
            relative_error=abs(input_sum + bias_total + sum(softmax) - y) / scale,
            gap_without_softmax=(y - input_sum - bias_total) / scale, softmax_by_layer=softmax)
    return result


def integrated_gradients(adapter: ViTAdapter, pixels: torch.Tensor, target: int, reference: torch.Tensor,
                         kind: str, steps: int = IG_STEPS, progress: Progress | None = None) -> PixelAttribution:
    """captum Integrated Gradients from `reference` (Gauss-Legendre, `steps` points), with its completeness."""
    from captum.attr import IntegratedGradients

    if not 1 <= steps <= 512:
        raise InterpscopeError(f"IG steps must be 1-512, not {steps}.")
    calls = [0]
    batches = -(-steps // IMAGES_PER_BATCH)

    def forward(batch: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if progress is not None and calls[0] <= batches:
            progress(calls[0], batches)
        return adapter.model(pixel_values=batch).logits[:, target]

    with torch.enable_grad():
        attributions = IntegratedGradients(forward).attribute(
            pixels, baselines=reference, n_steps=steps, internal_batch_size=IMAGES_PER_BATCH)
    logits = class_logits(adapter, torch.cat([pixels, reference]))
    value, at_reference = float(logits[0, target]), float(logits[1, target])
    relevance = attributions[0].detach().double()
    total = float(relevance.sum())
    gap = total - (value - at_reference)
    return PixelAttribution(relevance=relevance.cpu().numpy(), logit=value,
                            logits=logits[0].double().cpu().numpy(),
                            completeness=Completeness(value=value, baseline_value=at_reference, relevance_sum=total,
                                                      gap=gap, relative_gap=abs(gap) / (abs(value - at_reference)
                                                                                        or 1.0),
                                                      steps=steps, baseline=kind, baseline_label=REFERENCES[kind]))


def patch_masks(adapter: ViTAdapter, device: torch.device | None = None) -> torch.Tensor:
    """[n_patches, 1, H, W] booleans, patch k = row-major k-th patch (the ViT's own patch order)."""
    (rows, cols), p = adapter.grid, adapter.patch_size
    height, width = adapter.image_size
    masks = torch.zeros(rows * cols, 1, height, width, dtype=torch.bool, device=device)
    for index in range(rows * cols):
        r, c = divmod(index, cols)
        masks[index, 0, r * p:(r + 1) * p, c * p:(c + 1) * p] = True
    return masks


def occlusion(adapter: ViTAdapter, pixels: torch.Tensor, target: int, reference: torch.Tensor,
              progress: Progress | None = None) -> PixelAttribution:
    """Each patch set to the reference in turn; the logit's drop, spread evenly over the patch's values."""
    masks = patch_masks(adapter, pixels.device)
    drops = []
    value_logits = class_logits(adapter, pixels)[0]
    value = float(value_logits[target])
    for start in range(0, len(masks), IMAGES_PER_BATCH):
        chunk = masks[start:start + IMAGES_PER_BATCH]
        batch = torch.where(chunk, reference, pixels)
        drops.append(value - class_logits(adapter, batch)[:, target].double())
        if progress is not None:
            progress(min(start + IMAGES_PER_BATCH, len(masks)), len(masks))
    drop = torch.cat(drops).cpu()
    per_value = adapter.patch_size ** 2 * pixels.shape[1]
    spread = (masks.cpu().double() * (drop / per_value)[:, None, None, None]).sum(0)
    relevance = spread.expand(pixels.shape[1], -1, -1)
    return PixelAttribution(relevance=relevance.numpy().copy(), logit=value,
                            logits=value_logits.double().cpu().numpy())


def attribute_pixels(adapter: ViTAdapter, pixels: torch.Tensor, target: int, method: str,
                     preprocessing: Preprocessing, *, reference: str = "mean", ig_steps: int = IG_STEPS,
                     progress: Progress | None = None) -> PixelAttribution:
    """Relevance per input value of `method` for class `target`, holding the model's lock."""
    chosen = get_image_method(method)
    target = check_class(adapter, target)
    with model_lock(adapter.model):
        ref = reference_input(pixels, reference, preprocessing) if chosen.uses_reference else None
        rules = chosen.rules(adapter) if chosen.rules is not None else None
        return chosen.compute(adapter, pixels, target, rules=rules, reference=ref, reference_name=reference,
                              ig_steps=ig_steps, progress=progress)


# --- each method's pixel computation, as its registration names it (interpscope.relevance.builtin) ----------------
def pixels_by_rules(adapter: ViTAdapter, pixels: torch.Tensor, target: int, *, rules: Sequence[Rule] | None,
                    **_: object) -> PixelAttribution:
    """One forward and one backward pass under the method's LRP rules; no rules: plain Gradient x Input."""
    if rules is None:
        return rule_attribution(adapter, pixels, target, [], conservation=False)
    return rule_attribution(adapter, pixels, target, rules)


def pixels_by_integrated_gradients(adapter: ViTAdapter, pixels: torch.Tensor, target: int, *, reference: torch.Tensor,
                                   reference_name: str, ig_steps: int, progress: Progress | None = None,
                                   **_: object) -> PixelAttribution:
    return integrated_gradients(adapter, pixels, target, reference, reference_name, ig_steps, progress)


def pixels_by_occlusion(adapter: ViTAdapter, pixels: torch.Tensor, target: int, *, reference: torch.Tensor,
                        progress: Progress | None = None, **_: object) -> PixelAttribution:
    return occlusion(adapter, pixels, target, reference, progress)


def patch_sums(adapter: ViTAdapter, pixel_map: np.ndarray) -> np.ndarray:
    """[H, W] -> [rows, cols]: each patch's sum."""
    (rows, cols), p = adapter.grid, adapter.patch_size
    return pixel_map[:rows * p, :cols * p].reshape(rows, p, cols, p).sum(axis=(1, 3))
