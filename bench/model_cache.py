"""Process memory of the model cache when one process is asked for the same model many ways.

The sequence: the bundled name, three spellings of its converted folder, then bfloat16, float16 and float64
copies. Each budget runs in a fresh subprocess; RSS (MB) is read after every load. Prints JSON.
Usage: .venv/bin/python bench/model_cache.py [--budgets default,1200]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, psutil
sys.path.insert(0, sys.argv[1])
from interpscope.models import load_model, smollm2
from interpscope.models.loading import cached_models
folder = str(smollm2.cache_dir())
steps = [("smollm2-135m", "float32"), (folder, "float32"), (folder + "/", "float32"),
         (os.path.relpath(folder), "float32"), ("smollm2-135m", "bfloat16"), ("smollm2-135m", "float16"),
         ("smollm2-135m", "float64")]
rss = lambda: psutil.Process().memory_info().rss / 2**20
out = {"start_mb": round(rss())}
rows = []
for name, dtype in steps:
    load_model(name, device="cpu", dtype=dtype)
    rows.append({"model": name if name == "smollm2-135m" else "folder:" + name[-12:], "dtype": dtype,
                 "rss_mb": round(rss()), "copies": len(cached_models())})
out["steps"] = rows
out["peak_rss_mb"] = round(psutil.Process().memory_info().rss / 2**20)
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budgets", default="default,1200", help="comma list of budgets in MB ('default' = 40% RAM)")
    args = parser.parse_args()
    results = {}
    for budget in args.budgets.split(","):
        env = dict(os.environ)
        env.pop("INTERPSCOPE_MODEL_MEMORY_MB", None)
        if budget != "default":
            env["INTERPSCOPE_MODEL_MEMORY_MB"] = budget
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, capture_output=True, text=True,
                              cwd=ROOT, check=True)
        results[budget] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({"load_average": os.getloadavg(), "budgets": results}, indent=1))


if __name__ == "__main__":
    main()
