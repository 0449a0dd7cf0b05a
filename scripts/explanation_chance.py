"""Measure each feature store's chance score for its written explanations and keep it in the store folder.

The chance score is what an unrelated explanation (another random feature's) scores by the same detection scorer
on a feature's held-out contexts (interpscope.sae.store.explanation_quality); the feature browser marks explanations
at or below it. The negative pool is the one `interpscope sae explain` scores against (explain.negative_pool).

    nice -n 10 .venv/bin/python scripts/explanation_chance.py [--store NAME ...] [--features 400]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.models import load_model  # noqa: E402
from interpscope.sae.store import FeatureStore, list_stores  # noqa: E402
from interpscope.sae.store.explain import negative_pool  # noqa: E402
from interpscope.sae.store.explanation_quality import explanation_summary, measure_chance, write_chance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", help="store name (default: every store with explanations)")
    parser.add_argument("--features", type=int, default=400, help="features sampled per store")
    args = parser.parse_args()
    for path in list_stores():
        store = FeatureStore(path)
        if (args.store and store.name not in args.store) or not store.explanations:
            continue
        lm = load_model(store.spec["model_name"], device="cpu")
        pool = negative_pool(lm, store.load_sae(), store)
        chance = measure_chance(store, pool, n_features=args.features)
        write_chance(store, chance)
        print(json.dumps({"store": store.name, "chance": chance, "summary": explanation_summary(store)}), flush=True)


if __name__ == "__main__":
    main()
