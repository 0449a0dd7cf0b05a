"""Which RelP rule set tracks real activation patching best on the bundled SmolLM2: every rule set of
interpscope.causal.attribution.RELP_RULES (CP-LRP, the RelP paper's half rule, AttnLRP) beside plain attribution
patching (AtP), on the IOI-style and greater-than pairs of bench/relp_agreement.py.

Per pair: the real grids (resid and attn by default; one batched, resumed pass per layer), then one backward pass per
estimate; Pearson r over the changed cells per pair, and pooled over the pairs of a task. Each finished pair is
appended to --rows (JSON lines), so a run cut short resumes with the same command. Prints one JSON object with the
load average before and after.

Run: nice -n 10 .venv/bin/python bench/patching_rules.py [--pairs 3] [--kinds resid,attn,mlp] [--rows FILE]
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

from bench.relp_agreement import KINDS, PAIRS  # noqa: E402
from interpscope.capture import model_lock  # noqa: E402
from interpscope.causal.attribution import RELP_RULES, approximate_grids, pearson  # noqa: E402
from interpscope.causal.patching import changed, real_grids  # noqa: E402
from interpscope.causal.run import prepare  # noqa: E402

ESTIMATES = ["atp", *(f"relp:{name}" for name in RELP_RULES)]


def run_pair(lm, task: str, clean: str, corrupt: str, answer, wrong, kinds: list[str]) -> dict:
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, "logit-diff", answer, wrong, None, heads="heads" in kinds)
        ids, span = ready.pair.corrupt_ids, ready.span
        start = time.perf_counter()
        real = {k: (v - ready.corrupt_value) / span
                for k, v in real_grids(lm.adapter, ids, ready.metric, ready.clean, ready.corrupt, kinds).items()}
        seconds["real"] = time.perf_counter() - start
        estimates = {}
        for name in ESTIMATES:
            start = time.perf_counter()
            method, _, rules = name.partition(":")
            grids = approximate_grids(lm.model, lm.adapter, ids, ready.metric, ready.clean, ready.corrupt, kinds,
                                      method, rules or "cp-lrp")
            estimates[name] = {k: v / span for k, v in grids.items()}
            seconds[name] = time.perf_counter() - start

    row: dict = {"task": task, "clean": clean, "corrupt": corrupt, "tokens": ready.pair.n_tokens,
                 "clean_value": ready.clean_value, "corrupt_value": ready.corrupt_value, "seconds": seconds,
                 "kinds": {}}
    for kind in kinds:
        mask = changed(lm.adapter, kind, ready.clean, ready.corrupt)
        row["kinds"][kind] = {"cells": int(mask.sum()), "real": real[kind][mask].tolist(),
                              **{name: estimates[name][kind][mask].tolist() for name in ESTIMATES},
                              "r": {name: pearson(estimates[name][kind], real[kind], mask) for name in ESTIMATES}}
    row["wall_seconds"] = time.perf_counter() - started
    return row


def pooled(rows: list[dict]) -> dict:
    """Per task and kind: cells, pooled r per estimate and the per-pair r's."""
    out: dict = {}
    for task in sorted({r["task"] for r in rows}):
        for kind in ("resid", "attn", "mlp", "heads"):
            mine = [r for r in rows if r["task"] == task and kind in r["kinds"]]
            if not mine:
                continue
            real = np.concatenate([r["kinds"][kind]["real"] for r in mine])
            everything = np.ones(real.size, dtype=bool)
            out.setdefault(task, {})[kind] = {
                "pairs": len(mine), "cells": int(real.size),
                "r_pooled": {name: pearson(np.concatenate([r["kinds"][kind][name] for r in mine]), real, everything)
                             for name in ESTIMATES},
                "r_per_pair": {name: [r["kinds"][kind]["r"][name] for r in mine] for name in ESTIMATES}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=Path("/tmp/patching_rules_rows.jsonl"))
    parser.add_argument("--pairs", type=int, default=3, help="pairs per task (default 3)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="components (default resid,attn)")
    args = parser.parse_args()
    import interpscope

    lm = interpscope.load("smollm2-135m", device="cpu")
    done = [json.loads(line) for line in args.rows.read_text().splitlines()] if args.rows.is_file() else []
    seen = {(r["clean"], r["corrupt"]) for r in done}
    load_before = os.getloadavg()
    for task, pairs in PAIRS.items():
        for clean, corrupt, answer, wrong in pairs[:args.pairs]:
            if (clean, corrupt) in seen:
                continue
            row = run_pair(lm, task, clean, corrupt, answer, wrong, args.kinds.split(","))
            row["load_average"] = os.getloadavg()
            with args.rows.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            done.append(row)
            print(f"{task}: {clean!r} done in {row['wall_seconds']:.0f} s", file=sys.stderr)
    print(json.dumps({"model": lm.name, "estimates": ESTIMATES, "pooled": pooled(done),
                      "pairs": [{k: v for k, v in r.items() if k != "kinds"} for r in done],
                      "load_average_before": load_before, "load_average_after": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
