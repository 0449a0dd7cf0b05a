"""How well attribution patching (AtP, gradients) and relevance patching (RelP, LRP) track real activation patching
on the bundled SmolLM2, for IOI-style and greater-than prompt pairs (issue 26's target: RelP r >= 0.9 on residual
stream and attention outputs).

For each pair: the real grids (resid and attn; --kinds adds mlp; one forward pass per changed cell), then AtP, RelP
under CP-LRP rules and RelP under AttnLRP rules; Pearson r of each estimate against real patching over the cells the
patch changes (interpscope.causal.attribution.pearson), per pair and pooled over the pairs of a task. Each finished
pair is written to --rows (JSON lines), so a run cut short resumes with the same command. Prints one JSON object.

Run: nice -n 15 .venv/bin/python bench/relp_agreement.py [--rows FILE] [--only ioi|greater-than]
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

from interpscope.capture import model_lock  # noqa: E402
from interpscope.causal.attribution import approximate_grids, pearson  # noqa: E402
from interpscope.causal.run import patch, prepare  # noqa: E402

KINDS = ["resid", "attn"]  # the target kinds; --kinds adds mlp
PAIRS = {
    "ioi": [
        ("When Mary and John went to the store, John gave a drink to",
         "When Mary and John went to the store, Mary gave a drink to", " Mary", " John"),
        ("After John and Mary went to the park, Mary gave a ball to",
         "After John and Mary went to the park, John gave a ball to", " John", " Mary"),
        ("Then, Tom and Anna had a long argument. Afterwards Tom said to",
         "Then, Tom and Anna had a long argument. Afterwards Anna said to", " Anna", " Tom"),
    ],
    "greater-than": [
        ("The war lasted from the year 1732 to the year 17", "The war lasted from the year 1701 to the year 17",
         None, None),
        ("The strike lasted from the year 1654 to the year 16", "The strike lasted from the year 1601 to the year 16",
         None, None),
        ("The deal lasted from the year 1843 to the year 18", "The deal lasted from the year 1801 to the year 18",
         None, None),
    ],
}


def run_pair(lm, task: str, clean: str, corrupt: str, answer, wrong, kinds: list[str]) -> dict:
    started = time.perf_counter()
    result = patch(lm, clean, corrupt, answer=answer, wrong=wrong, components=kinds, methods=["real", "atp", "relp"],
                   relp_rules="cp-lrp")
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, "logit-diff", answer, wrong, None)
        attn_lrp = approximate_grids(lm.model, lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean,
                                     ready.corrupt, kinds, "relp", "attnlrp")
    row = {"task": task, "clean": clean, "corrupt": corrupt, "answer": result.answer, "wrong": result.wrong,
           "tokens": len(result.clean_tokens), "clean_value": result.clean_value,
           "corrupt_value": result.corrupt_value, "seconds": result.seconds, "kinds": {}}
    for kind in kinds:
        block = result.grids[kind]
        mask = np.asarray(block["changed"], dtype=bool)
        attn_relp = attn_lrp[kind] / (result.clean_value - result.corrupt_value)
        row["kinds"][kind] = {
            "cells": int(mask.sum()), "real": np.asarray(block["real"])[mask].tolist(),
            "atp": np.asarray(block["atp"])[mask].tolist(), "relp_cplrp": np.asarray(block["relp"])[mask].tolist(),
            "relp_attnlrp": attn_relp[mask].tolist(),
            "r_atp": result.agreement[kind].get("atp"), "r_relp_cplrp": result.agreement[kind].get("relp"),
            "r_relp_attnlrp": pearson(attn_relp, np.asarray(block["real"]), mask)}
    row["wall_seconds"] = time.perf_counter() - started
    return row


def pooled(rows: list[dict]) -> dict:
    out: dict = {}
    for task in sorted({r["task"] for r in rows}):
        out[task] = {}
        for kind in ("resid", "attn", "mlp"):
            mine = [r for r in rows if r["task"] == task and kind in r["kinds"]]
            if not mine:
                continue
            real = np.concatenate([r["kinds"][kind]["real"] for r in mine])
            scores = {"cells": int(real.size)}
            for name in ("atp", "relp_cplrp", "relp_attnlrp"):
                estimate = np.concatenate([r["kinds"][kind][name] for r in mine])
                scores[f"r_{name}"] = pearson(estimate, real, np.ones(real.size, dtype=bool))
            per_pair = {name: [r["kinds"][kind][f"r_{name}"] for r in mine]
                        for name in ("atp", "relp_cplrp", "relp_attnlrp")}
            scores["per_pair"] = per_pair
            out[task][kind] = scores
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=Path("/tmp/relp_agreement_rows.jsonl"))
    parser.add_argument("--only", choices=sorted(PAIRS))
    parser.add_argument("--pairs", type=int, default=2, help="pairs per task (default 2 of 3)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="components (default resid,attn)")
    args = parser.parse_args()
    import interpscope

    lm = interpscope.load("smollm2-135m", device="cpu")
    done = [json.loads(line) for line in args.rows.read_text().splitlines()] if args.rows.is_file() else []
    seen = {(r["clean"], r["corrupt"]) for r in done}
    load_before = os.getloadavg()
    for task, pairs in PAIRS.items():
        if args.only and task != args.only:
            continue
        for clean, corrupt, answer, wrong in pairs[:args.pairs]:
            if (clean, corrupt) in seen:
                continue
            row = run_pair(lm, task, clean, corrupt, answer, wrong, args.kinds.split(","))
            with args.rows.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            done.append(row)
            print(f"{task}: {clean!r} done in {row['wall_seconds']:.0f} s", file=sys.stderr)
    summary = {"model": lm.name, "pooled": pooled(done),
               "pairs": [{k: v for k, v in r.items() if k != "kinds"} for r in done],
               "load_average_before": load_before, "load_average_after": os.getloadavg()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
