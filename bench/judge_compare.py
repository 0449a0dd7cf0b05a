"""Is a stronger offline judge better at separating explanations from random ones (issue 42.3)? The detection metric
(interpscope.sae.bench.detection) on the same sampled features of a shipped SAE, once with the bundled SmolLM2-135M
as the judge and once with the bundled Gemma 3 270M: per judge, the mean AUROC with each feature's explanation and
with a random one (another sampled feature's), and the gap with its bootstrap interval. Prints one JSON object with
the load average before and after.

Run: nice -n 10 .venv/bin/python bench/judge_compare.py [--sae assets/saes/smollm2-135m-blocks.15-gated-4608]
         [--features 8]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sae", default="assets/saes/smollm2-135m-blocks.15-gated-4608")
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--judges", default="smollm2-135m,gemma3-270m")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from interpscope.models import load_model
    from interpscope.sae.bench.run import bench_sae
    from interpscope.sae.bench.simulator import lm_judge

    lm = load_model("smollm2-135m", device="cpu")
    out: dict = {"sae": args.sae, "n_features": args.features, "load_before": os.getloadavg(), "judges": {}}
    for name in args.judges.split(","):
        judge_lm = lm if name == lm.name else load_model(name, device="cpu")
        started = time.perf_counter()
        result = bench_sae(lm, args.sae, metric_names="detection", use_cache=False,
                           options={"judge": lm_judge(judge_lm), "explanations": {"n_features": args.features}})
        metric = result.to_dict()["metrics"]["detection"]
        out["judges"][name] = {"measures": metric.get("measures"), "seconds": time.perf_counter() - started,
                               "load_after": os.getloadavg(),
                               "settings": metric.get("settings"),
                               "rows": [{k: r.get(k) for k in ("feature", "explanation", "auroc", "random_auroc")}
                                        for r in metric.get("details", [])]}
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
