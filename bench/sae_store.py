"""Feature store benchmark: build time, size and tokens/s for an SAE over a corpus sample, then feature-page open time.

Open time = the server-side work of one feature page: read the card from the (memory-mapped) store and build its
figures and context HTML, for 100 random features; p50/p95/max in milliseconds. Measured twice: with the store
already open (as the page keeps it) and with the store opened afresh for every feature (cold).

    nice -n 10 .venv/bin/python bench/sae_store.py --sae assets/saes/smollm2-135m-blocks.15-gated-4608 \
        [--store DIR] [--build --tokens 65536 [--from-cache]] [--out bench-sae-store.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.feature_card import contexts_table_html  # noqa: E402
from interpscope.figures.sae import histogram_figure, logits_figure  # noqa: E402
from interpscope.sae.store import FeatureStore, build_store, read_manifest  # noqa: E402
from interpscope.sae.store.layout import default_store_dir  # noqa: E402


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def render(card) -> None:
    """What the feature page computes besides the card: figures and context HTML."""
    histogram_figure(card.histogram.edges, card.histogram.counts, "h", "activation")
    histogram_figure(card.logit_histogram.edges, card.logit_histogram.counts, "l", "logit", y_log=True)
    logits_figure(card.top_logits, card.bottom_logits, "t")
    contexts_table_html([vars(c) for c in card.top_contexts], card.max_activation)
    for interval in card.intervals:
        contexts_table_html([vars(c) for c in interval.examples], card.max_activation)


def open_times(store_path: Path, n: int, seed: int, cold: bool) -> dict:
    store = FeatureStore(store_path)
    ids = np.random.default_rng(seed).choice(store.d_sae, size=min(n, store.d_sae), replace=False)
    times = []
    for feature in ids:
        start = time.perf_counter()
        opened = FeatureStore(store_path) if cold else store
        render(opened.card(int(feature)))
        times.append((time.perf_counter() - start) * 1000)
    times = np.array(times)
    return {"n": int(times.size), "p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95)),
            "max_ms": float(times.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sae", default="assets/saes/smollm2-135m-blocks.15-gated-4608")
    parser.add_argument("--store", default=None, help="store folder (default: the SAE's default store)")
    parser.add_argument("--build", action="store_true", help="build (or resume) the store first and time it")
    parser.add_argument("--tokens", type=int, default=65536)
    parser.add_argument("--from-cache", action="store_true", help="build from a matching SAE-training activation cache")
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    store_path = Path(args.store) if args.store else default_store_dir(args.sae)
    report: dict = {"sae": args.sae, "store": str(store_path)}
    if args.build:
        import torch

        from interpscope.models import load_model
        from interpscope.sae import load_sae

        lm = load_model(load_sae(args.sae).cfg.model_name or "smollm2-135m", device="cpu")
        start = time.perf_counter()
        build_store(lm, args.sae, store_path, n_tokens=args.tokens, eval_tokens=2048, use_cache=args.from_cache)
        report["build_wall_seconds"] = time.perf_counter() - start
        report["torch_threads"] = torch.get_num_threads()
    manifest = read_manifest(store_path)
    n_tokens = manifest["n_seqs"] * manifest["spec"]["context_size"]
    build = manifest["build_seconds"]
    report.update({
        "activations_from": manifest["spec"].get("activations", "model"),
        "features": manifest["spec"]["d_sae"], "corpus_tokens": n_tokens, "nonzero_activations": manifest["n_nonzero"],
        "store_bytes": folder_size(store_path), "build_seconds": build,
        "tokens_per_second_activation_pass": n_tokens / build["activations"],
        "tokens_per_second_overall": n_tokens / build["total"],
        "open_warm": open_times(store_path, args.features, 0, cold=False),
        "open_cold": open_times(store_path, args.features, 1, cold=True),
    })
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
