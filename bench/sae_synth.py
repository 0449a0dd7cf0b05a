"""`interpscope sae synth` at its documented size (issue 42's target: the six SAE architectures in at most 15 min on
a CPU). Prints JSON: wall seconds, CPU seconds of this process (what an idle core would take), the load average
before and after (a shared machine slows the wall time, not the CPU time), the target and whether it is met by
the CPU time, and the run's reference and matched MCCs.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/sae_synth.py [--tokens 614400] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.sae.synth import SynthData, SynthSpec  # noqa: E402
from interpscope.sae.synth_run import SynthSettings, default_grid, run_synth  # noqa: E402

TARGET_SECONDS = 15 * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=SynthSettings.tokens)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = SynthSpec()
    specs = default_grid(SynthData(spec).expected_l0, spec.n_features)
    load_before = os.getloadavg()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_synth(spec, specs, SynthSettings(tokens=args.tokens))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    report = {"benchmark": "sae_synth", "saes": len(specs), "tokens_per_sae": args.tokens, "wall_seconds": wall,
              "cpu_seconds": cpu, "threads": 1, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "target_seconds": TARGET_SECONDS, "cpu_within_target": cpu <= TARGET_SECONDS,
              "reference": result.reference, "chance": result.chance,
              "matched_mcc": {m["architecture"]: m["mcc"] for m in result.matched}}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
