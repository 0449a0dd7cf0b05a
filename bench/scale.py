"""Scale-out benchmark: tokens/s of activation caching, feature-store pass 1 and SAE evaluation in one process and
on Ray workers (a local cluster on this machine), the workers' startup, the driver's merge time, and whether the
outputs are identical. Device auto (CUDA when present). Prints JSON with os.getloadavg() before and after.

    nice -n 10 .venv/bin/python bench/scale.py [--model smollm2-135m] [--workers 1,2] [--cache-tokens 8192]
        [--store-tokens 8192] [--eval-tokens 2048] [--out bench-scale.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.models import load_model  # noqa: E402
from interpscope.scale import Scale  # noqa: E402

SAE = "assets/saes/smollm2-135m-blocks.15-gated-4608"


def _figures(tokens: int, seconds: float, scale: Scale | None) -> dict:
    stats = scale.stats if scale else None
    row = {"tokens": tokens, "seconds": round(seconds, 2), "tokens_per_second": round(tokens / seconds, 1)}
    if stats:
        work = max(1e-9, seconds - stats.startup_seconds)
        row.update({"startup_seconds": round(stats.startup_seconds, 2), "merge_seconds": round(stats.merge_seconds, 3),
                    "merge_fraction": round(stats.merge_seconds / seconds, 4), "shards": stats.shards,
                    "tokens_per_second_after_startup": round(tokens / work, 1)})
    return row


def cache_job(lm, args, workers: int, root: Path) -> tuple[dict, bytes]:
    from interpscope.sae.activations import build_activation_cache

    scale = Scale(workers=workers) if workers > 1 else None
    started = time.perf_counter()
    cache = build_activation_cache(lm, "blocks.15.hook_resid_post", args.cache_tokens, folder=root / f"cache{workers}",
                                   scale=scale)
    seconds = time.perf_counter() - started
    return _figures(cache.n_rows + cache.n_rows // 127, seconds, scale), (cache.folder / "acts.bin").read_bytes()


def store_job(lm, args, workers: int, root: Path) -> tuple[dict, bytes]:
    from interpscope.sae.store import build_store

    scale = Scale(workers=workers) if workers > 1 else None
    started = time.perf_counter()
    out = build_store(lm, SAE, root / f"store{workers}", n_tokens=args.store_tokens, eval_tokens=0, scale=scale)
    seconds = time.perf_counter() - started
    manifest = json.loads((out / "manifest.json").read_text())
    row = _figures(manifest["n_seqs"] * 128, seconds, scale)
    row["pass1_seconds"] = round(manifest["build_seconds"]["activations"], 2)
    row["pass1_tokens_per_second"] = round(row["tokens"] / manifest["build_seconds"]["activations"], 1)
    digest = b"".join((out / name).read_bytes() for name in sorted(os.listdir(out)) if name.endswith(".npy"))
    return row, digest


def eval_job(lm, args, workers: int, root: Path) -> tuple[dict, bytes]:
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae

    scale = Scale(workers=workers) if workers > 1 else None
    started = time.perf_counter()
    result = evaluate_sae(lm, load_sae(SAE), n_tokens=args.eval_tokens, scale=scale)
    seconds = time.perf_counter() - started
    return _figures(args.eval_tokens, seconds, scale), json.dumps(result.summary()).encode() + result.density.tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (1 = one process)")
    parser.add_argument("--cache-tokens", type=int, default=8192)
    parser.add_argument("--store-tokens", type=int, default=8192)
    parser.add_argument("--eval-tokens", type=int, default=2048)
    parser.add_argument("--jobs", default="cache,store,eval")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    load_before = os.getloadavg()
    lm = load_model(args.model, device=args.device)
    report: dict = {"model": lm.name, "device": str(lm.device), "dtype": str(lm.dtype), "cores": os.cpu_count(),
                    "loadavg_before": [round(x, 2) for x in load_before], "jobs": {}}
    jobs = {"cache": cache_job, "store": store_job, "eval": eval_job}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["INTERPSCOPE_DATA_DIR"] = str(Path(tmp) / "data")
        for name in args.jobs.split(","):
            rows, outputs = {}, []
            for workers in counts:
                row, output = jobs[name](lm, args, workers, Path(tmp))
                rows[str(workers)] = row
                outputs.append(output)
            rows["identical_outputs"] = all(out == outputs[0] for out in outputs)
            report["jobs"][name] = rows
            print(json.dumps({name: rows}), file=sys.stderr, flush=True)
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
