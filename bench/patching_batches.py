"""What the residual grid's batching and narrow unembedding save on the 29-token early-difference pair: the real
residual grid computed under the old settings (24 cells a batch, whole-vocabulary unembedding) and the new ones
(narrow unembedding; batches cut by interpscope.patching.patching.plan_batches at several per-pass costs), in CPU time
(load-robust: the machine is shared) and wall time, with the largest difference from the old grid (normalised).

Run: nice -n 5 .venv/bin/python bench/patching_batches.py [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.patching import PAIRS  # noqa: E402
from interpscope.capture import model_lock  # noqa: E402
from interpscope.patching import patching  # noqa: E402
from interpscope.patching.prompts import Metric  # noqa: E402
from interpscope.patching.run import prepare  # noqa: E402

CONFIGS = [("old: 24 per batch, full unembedding", 10**9, False), ("full unembedding, cut at 32", 32, False),
           ("narrow, 24 per batch", 10**9, True), ("narrow, cut at 16", 16, True), ("narrow, cut at 32", 32, True),
           ("narrow, cut at 64", 64, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    import interpscope

    lm = interpscope.load("smollm2-135m", device="cpu")
    clean, corrupt, answer, wrong = PAIRS["early-difference-32"]
    out: dict = {"threads": torch.get_num_threads(), "load_before": os.getloadavg(), "runs": {}}
    grids = {}
    columns = Metric.columns
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, "logit-diff", answer, wrong, None, heads=False)
        try:
            for label, overhead, narrow in CONFIGS:  # the settings swapped in for this bench only
                patching.plan_batches.__defaults__ = (overhead,)
                Metric.columns = columns if narrow else (lambda self: None)  # type: ignore[method-assign]
                cpu, wall = time.process_time(), time.perf_counter()
                grids[label] = patching.real_grids(lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean,
                                                   ready.corrupt, ["resid"])["resid"]
                out["runs"][label] = {"cpu_seconds": time.process_time() - cpu,
                                      "wall_seconds": time.perf_counter() - wall, "load": os.getloadavg()}
                print(label, out["runs"][label], file=sys.stderr)
        finally:
            patching.plan_batches.__defaults__ = (patching.PASS_OVERHEAD,)
            Metric.columns = columns  # type: ignore[method-assign]
    base = grids[CONFIGS[0][0]]
    for label, grid in grids.items():
        out["runs"][label]["max_abs_diff_vs_old_normalised"] = float(np.abs(grid - base).max() / ready.span)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
