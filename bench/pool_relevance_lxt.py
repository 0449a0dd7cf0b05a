"""Pool the rounds of several bench/relevance_lxt.py runs (those that kept `cpu_seconds_per_round`): per length and
comparison, the paired median over every round of every run with its 95% bootstrap interval, and the same with runs
as the unit (each run's paired median, their median and a bootstrap over runs), because between-run noise on a
shared VM is as large as the 5% target. Prints one JSON object.

Run: .venv/bin/python bench/pool_relevance_lxt.py bench/reference/relevance-lxt-cpu-2026-12-03-*.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

PAIRS = {"attnlrp_over_gradient": ("ours_attnlrp", "gradient"), "attnlrp_over_lxt": ("ours_attnlrp", "lxt_attnlrp"),
         "cplrp_over_lxt": ("ours_cplrp", "lxt_cplrp"), "cplrp_over_gradient": ("ours_cplrp", "gradient"),
         # kept by runs since 2026-12-03 evening only; pooled over the runs that have them
         "attnlrp_map_only_over_gradient": ("ours_attnlrp_map_only", "gradient"),
         "lxt_attnlrp_over_gradient_all_logits": ("lxt_attnlrp", "gradient_all_logits"),
         "attnlrp_over_gradient_all_logits": ("ours_attnlrp", "gradient_all_logits"),
         "gradient_all_logits_over_gradient": ("gradient_all_logits", "gradient")}


def interval(values: np.ndarray, seed: int = 0) -> list[float]:
    draws = np.random.default_rng(seed).choice(values, size=(4000, values.size))
    return [float(q) for q in np.quantile(np.median(draws, axis=1), [0.025, 0.975])]


def pool(paths: list[str]) -> dict:
    runs = []
    for path in paths:
        document = json.loads(Path(path).read_text())
        lengths = {key: value for key, value in document.items()
                   if key.isdigit() and "cpu_seconds_per_round" in value}
        if lengths:
            runs.append((Path(path).name, document, lengths))
    if not runs:
        raise SystemExit("none of these files keeps cpu_seconds_per_round (bench/relevance_lxt.py since 2026-12-03)")
    report: dict = {"runs": [{"file": name, "load_average_start": doc.get("load_average_start"),
                              "load_average_end": doc.get("load_average_end")} for name, doc, _ in runs]}
    for length in sorted({key for _, _, lengths in runs for key in lengths}, key=int):
        entry: dict = {}
        for label, (a, b) in PAIRS.items():
            per_run = [np.array(lengths[length]["cpu_seconds_per_round"][a]) /
                       np.array(lengths[length]["cpu_seconds_per_round"][b]) for _, _, lengths in runs
                       if length in lengths and {a, b} <= set(lengths[length]["cpu_seconds_per_round"])]
            if not per_run:
                continue
            rounds = np.concatenate(per_run)
            medians = np.array([float(np.median(r)) for r in per_run])
            entry[label] = {"rounds": int(rounds.size), "pooled_paired_median": float(np.median(rounds)),
                            "pooled_ci95": interval(rounds), "run_medians": medians.tolist(),
                            "median_of_run_medians": float(np.median(medians)),
                            "runs_ci95": interval(medians) if medians.size >= 3 else None}
        report[length] = entry
    return report


if __name__ == "__main__":
    print(json.dumps(pool(sys.argv[1:]), indent=2))
