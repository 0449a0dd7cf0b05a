"""Patch flipping on the shipped ViT (vit-fashion-mnist) over its shipped held-out examples. Prints JSON (and writes
it with --out).

For each example image (its predicted class): every image method's map (AttnLRP, CP-LRP, Gradient x Input,
Integrated Gradients, patch occlusion), patches removed most relevant first (set to the image's mean), the class
logit's curve and its AUC (lower = more faithful), beside --orders random patch orders. Reports each method's mean
AUC, the random orders' mean AUC, the share of images where the method's AUC is below that image's random mean, the
CP-LRP / AttnLRP conservation errors, the seconds per map, and the accuracy on the examples.

Run:  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/vit_flipping.py --out bench/results/vit_flipping.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit-fashion-mnist")
    parser.add_argument("--orders", type=int, default=8, help="random patch orders per image")
    parser.add_argument("--limit", type=int, default=None, help="only the first N examples")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from interpscope.images import decode_image
    from interpscope.models.vision import bundled_examples, load_image_model
    from interpscope.relevance.image import image_methods
    from interpscope.relevance.image_api import explain_image
    from interpscope.relevance.image_faithfulness import patch_flipping

    lm = load_image_model(args.model, device="cpu")
    examples = bundled_examples(lm)[:args.limit]
    aucs: dict[str, list[float]] = {name: [] for name in image_methods()}
    seconds: dict[str, list[float]] = {name: [] for name in image_methods()}
    below: dict[str, int] = {name: 0 for name in image_methods()}
    random_aucs, errors, right = [], {"cplrp": [], "attnlrp": []}, 0
    start = time.perf_counter()
    for example in examples:
        image = decode_image(example.path.read_bytes(), example.name)
        maps = [explain_image(lm, image, name) for name in image_methods()]
        right += maps[0].predicted_class == example.label
        flipping = patch_flipping(lm, image, maps, random_orders=args.orders)
        random_aucs.append(flipping.random.auc_mean)
        for result, curve in zip(maps, flipping.curves, strict=True):
            aucs[result.method].append(curve.auc)
            seconds[result.method].append(result.seconds)
            below[result.method] += curve.auc < flipping.random.auc_mean
            if result.conservation is not None:
                errors[result.method].append(result.conservation.relative_error)
    n = len(examples)
    report = {
        "model": lm.name, "images": n, "accuracy_on_examples": right / n, "random_orders": args.orders,
        "removal": "most relevant patch first, set to the image's mean",
        "patches": lm.adapter.grid[0] * lm.adapter.grid[1],
        "random_mean_auc": statistics.fmean(random_aucs),
        "methods": {name: {"mean_auc": statistics.fmean(aucs[name]), "share_below_random": below[name] / n,
                           "median_seconds": statistics.median(seconds[name])} for name in image_methods()},
        "max_relative_conservation_error": {name: max(values) for name, values in errors.items()},
        "seconds": time.perf_counter() - start,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
