"""Cold start to first prediction on the bundled model, in a fresh process each time.

first_ever: empty data directory, so the GGUF is converted; warm: the converted cache is present.
Prints JSON: wall seconds and peak RSS (MB) of each run; warm is the median of --repeat runs.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import time, json
start = time.perf_counter()
from interpscope.models import load_model
from interpscope.predict import predict_next
lm = load_model("smollm2-135m", device="cpu")
loaded = time.perf_counter()
result = predict_next(lm, "The capital of France is", top=10)
print(json.dumps({"top": result.predictions[0].token, "load_s": loaded - start,
                  "in_process_s": time.perf_counter() - start}))
"""


def run_once(data_dir: str) -> dict:
    env = dict(os.environ, INTERPSCOPE_DATA_DIR=data_dir)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    info.update({"wall_s": round(wall, 2), "peak_rss_mb_upper_bound": round(max(peak_kb, before) / 1024, 1)})
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="interpscope-bench-") as data_dir:
        first = run_once(data_dir)
        warm = [run_once(data_dir) for _ in range(args.repeat)]
    print(json.dumps({
        "benchmark": "startup",
        "first_ever": first,
        "warm_runs": warm,
        "warm_median_wall_s": statistics.median(w["wall_s"] for w in warm),
        "warm_peak_rss_mb": max(w["peak_rss_mb_upper_bound"] for w in warm),
        "targets": {"warm_wall_s": 10, "peak_rss_mb": 2560},
        "note": "peak RSS is RUSAGE_CHILDREN max over runs so far (first_ever includes the conversion)",
    }, indent=2))


if __name__ == "__main__":
    main()
