"""`interpscope sae explain`: explanations of a store's features written by a bundled instruction-tuned model and
scored by detection (backend/interpscope/sae/store/explain.py), appended to the store resumably."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import list_of, non_negative_int, positive_int, ray_address
from interpscope.cli.common import add_outputs, check_outputs, write_outputs
from interpscope.cli.scale_args import check_ray_address, check_workers
from interpscope.scale.memory import batch_size_arg


def register(sae_sub) -> None:
    explain = sae_sub.add_parser("explain", help="write and score explanations of a store's features")
    explain.add_argument("--store", required=True, help="feature store folder (or a shipped store's name)")
    explain.add_argument("--features", type=list_of(non_negative_int), default=None,
                         help="comma-separated feature ids (default: every feature that fired)")
    explain.add_argument("--explainer", default="smollm2-135m", help="instruction-tuned model that writes them")
    explain.add_argument("--device", default="auto")
    explain.add_argument("--batch-size", type=batch_size_arg, default=16,
                         help="prompts per generation batch (default 16); auto: from free memory")
    explain.add_argument("--workers", type=positive_int, default=1,
                         help="Ray workers (needs the scale extra: pip install -e .[scale]); 1 = this process")
    explain.add_argument("--ray-address", type=ray_address, default=None, help="join a running Ray cluster instead")
    from interpscope.sae.store.documents import ExplanationRun

    add_outputs(explain, ExplanationRun, json_help="write the run's summary (JSON) to FILE; without FILE or with '-' "
                                                   "print it to stdout")
    explain.set_defaults(func=run_explain)


def _store_folder(text: str):
    """A store folder, or the name of a listed store (shipped or in the data dir)."""
    from pathlib import Path

    from interpscope.config import InterpscopeError
    from interpscope.sae.store import list_stores

    if Path(text).expanduser().is_dir():
        return Path(text).expanduser()
    for folder in list_stores():
        if folder.name == text:
            return folder
    raise InterpscopeError(f"No feature store {text!r}: give a store folder or one of "
                           f"{', '.join(f.name for f in list_stores()) or '(none built yet)'}.")


def run_explain(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.models import load_model
    from interpscope.sae.store import FeatureStore
    from interpscope.sae.store.explain import explain_store, model_writer, negative_pool
    check_outputs(args)
    if args.workers > 1 or args.ray_address:
        from interpscope.scale.cluster import require_ray

        require_ray()
        check_workers(args.workers, args.ray_address)
        check_ray_address(args.ray_address)
    store = FeatureStore(_store_folder(args.store))
    if args.features is not None:
        for feature in args.features:
            store.check_id(feature)
    explainer = load_model(args.explainer, device=args.device)
    writer = model_writer(explainer)
    if args.batch_size == "auto":
        from interpscope.scale.memory import resolve_batch_size

        args.batch_size = resolve_batch_size("auto", explainer, context=512, default=16, logits=True)
    loaded = load_model(store.spec["model_name"], device=args.device)
    pool = negative_pool(loaded, store.load_sae(), store)
    if args.workers > 1 or args.ray_address:
        from interpscope.sae.store.explain_jobs import explain_store_on_ray

        result = explain_store_on_ray(store, args.explainer, pool, features=args.features, workers=args.workers,
                                      address=args.ray_address, batch_size=args.batch_size, device=args.device)
    else:
        bars: list = []

        def progress(done: int, total: int) -> None:
            if not bars:
                bars.append(tqdm(total=total, desc="features", unit="feat", file=sys.stderr))
            bars[0].update(done - bars[0].n)

        result = explain_store(store, writer, pool, features=args.features, batch_size=args.batch_size,
                               progress=progress)
        for bar in bars:
            bar.close()
    scores = [e["score"] for e in result.values() if e.get("score") is not None]
    from interpscope.sae.store.documents import ExplanationRun

    summary = ExplanationRun(store=store.name, explained=len(result),
                             mean_score=sum(scores) / len(scores) if scores else None,
                             scorer="lexical simulator (balanced accuracy; 0.5 = chance)", writer=args.explainer)
    write_outputs(args, summary)
    if args.json != "-":
        print(f"{summary.explained} explanations in {store.folder}; mean detection score {summary.mean_score}")
    return 0
