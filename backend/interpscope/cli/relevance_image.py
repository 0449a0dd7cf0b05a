"""`interpscope explain --image FILE`: relevance of each pixel and patch for an image classifier's class logit.

Part of the explain command (interpscope.cli.relevance_cmd adds --image, --target-class, --reference and
--patch-flipping, and hands a run with --image here). The image is size-checked before it is decoded; an image given to
a text model, or text given to an image model, is refused before any work.
"""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.common import check_outputs, write_outputs
from interpscope.config import InterpscopeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The image-only flags (--image itself sits in explain's group of input sources)."""
    from interpscope.cli.argtypes import non_negative_int
    from interpscope.relevance.image import REFERENCES

    group = parser.add_argument_group("an image (--image FILE, with a ViT/DeiT image classifier)")
    group.add_argument("--target-class", type=non_negative_int, default=None,
                       help="explain this class's logit (its index; default: the predicted class)")
    group.add_argument("--reference", choices=list(REFERENCES), default=None,
                       help="what IG starts from, occlusion and patch flipping set patches to: "
                            + "; ".join(f"{k} = {v}" for k, v in REFERENCES.items()) + " (default mean)")
    group.add_argument("--patch-flipping", action="store_true",
                       help="instead of one map: every image method's map and its patch-flipping curve (most "
                            "relevant patch first) beside random orders; --json writes that document")


TEXT_ONLY = ("row", "target_token", "contrast", "all_rows", "out", "decoder_text")
IMAGE_ONLY = ("target_class", "reference", "patch_flipping")


def refuse_image_flags(args: argparse.Namespace) -> None:
    """Text given with an image-only flag: refused, not ignored (a --target-class the text run never read)."""
    given = [f"--{name.replace('_', '-')}" for name in IMAGE_ONLY
             if getattr(args, name, None) is not None and getattr(args, name) is not False]  # class 0 is given
    if given:
        raise InterpscopeError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --image (an image "
                               "classifier); for text, --target-token or --contrast chooses what is explained.")


def run(args: argparse.Namespace) -> int:
    """Explain one image file; prints the patch grid (and the conservation readout), writes --json."""
    from interpscope.images import read_image_file
    from interpscope.models.vision import load_image_model, model_modality
    from interpscope.relevance.image import image_methods

    given = [f"--{name.replace('_', '-')}" for name in TEXT_ONLY if getattr(args, name, None) not in (None, False)]
    if given:
        raise InterpscopeError(f"{', '.join(given)} go with text; an image takes --target-class, --reference, "
                               "--patch-flipping and the outputs --json, --csv, --png, --svg, --html.")
    from interpscope.cli.relevance_faithfulness import wants_faithfulness

    if wants_faithfulness(args):
        raise InterpscopeError("The faithfulness flags go with text; for an image use --patch-flipping.")
    check_outputs(args)
    image = read_image_file(args.image)
    if model_modality(args.model) != "image":
        raise InterpscopeError(f"{args.model} is a text model: --image needs an image classifier (ViT or DeiT), "
                               "e.g. --model vit-fashion-mnist. Give a text model --text or --file instead.")
    lm = load_image_model(args.model, device=args.device, dtype=args.dtype)
    method = args.method or next(iter(image_methods()))  # the registry's first: the LRP method
    if args.patch_flipping:
        return _flipping(args, lm, image)
    from interpscope.relevance.image_api import explain_image

    result = explain_image(lm, image, method, target_class=args.target_class, reference=args.reference or "mean",
                           ig_steps=getattr(args, "ig_steps", 32))
    write_outputs(args, result)
    if args.json != "-":
        _print_map(result)
    return 0


def _flipping(args: argparse.Namespace, lm, image) -> int:
    from interpscope.api import patch_flipping

    result = patch_flipping(lm, image, target_class=args.target_class, reference=args.reference or "mean")
    write_outputs(args, result)
    if args.json != "-":
        print(f"patch flipping on {result.model}: class {result.target_label!r} ({result.target_class}), "
              f"{result.n_patches} patches set to {result.reference_label}, most relevant first")
        for curve in result.curves:
            print(f"  AUC {curve.auc:10.4f}  {curve.method_label}")
        print(f"  AUC {result.random.auc_mean:10.4f}  random orders (sd {result.random.auc_std:.4f}, "
              f"{result.random.orders} orders)")
        print(result.reading())
    return 0


def _print_map(result) -> None:
    print(f"{result.method_label} on {result.model}: class {result.target_label!r} ({result.target_class}; "
          f"predicted {result.predicted_label!r}), logit {result.logit:.4f}, {result.seconds:.3f} s")
    if result.source_size != result.image_size:
        print(f"the {result.source_size[1]}x{result.source_size[0]} image was resized to the model's "
              f"{result.image_size[1]}x{result.image_size[0]}")
    print(f"patch relevance ({result.grid[0]} x {result.grid[1]} patches of {result.patch_size} px):")
    for row in result.patch_relevance:
        print("  " + " ".join(f"{value:+9.4f}" for value in row))
    if result.conservation is not None:
        c = result.conservation
        print(f"conservation: pixels {c.input_sum:.4f} + biases and embeddings {c.bias_sum:.4f} + softmax "
              f"{c.softmax_sum:.4f} vs {c.target_logit:.4f} (relative error {c.relative_error:.2e})")
    if result.completeness is not None:
        g = result.completeness
        print(f"completeness: sum {g.relevance_sum:.4f} vs f(x) - f(reference) {g.value - g.baseline_value:.4f} "
              f"(relative gap {g.relative_gap:.2e}, {g.steps} steps)", file=sys.stdout)
