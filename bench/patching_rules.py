"""Which RelP rule set tracks real activation patching best on the bundled SmolLM2: every rule set of
interpscope.patching.attribution.RELP_RULES beside plain attribution patching (AtP), on the IOI-style and greater-than
pairs of bench/relp_agreement.py, per pair, pooled over a task's pairs, and as the mean grid of each template; and
where the coefficients are taken (interpscope.patching.attribution.PATHS): on the clean run, the average of both runs
('ends'), and the midpoints of the corrupt -> clean input path ('ig1' .. 'ig3'), for AtP, relp-half-q and (at 'ig2')
every rule set.

Real patching runs once per pair (rows kept in --rows, resumable); a rule set added later is computed against the
stored real grids (--estimates-log). Prints one JSON object with the load average before and after.
--speed instead times AtP and RelP (the default and each path option) for all four grids, as the page runs them, on
bench/patching.py's two pairs (15 and 32 tokens), best and median of --repeats.

Run: nice -n 10 .venv/bin/python bench/patching_rules.py [--pairs 3] [--kinds resid,attn,mlp] [--rows FILE]
     nice -n 10 .venv/bin/python bench/patching_rules.py --speed [--repeats 5]
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.relp_agreement import evaluate  # noqa: E402
from interpscope.patching.attribution import RELP_PATH_OPTIONS, RELP_RULES, RULE_SETS  # noqa: E402

BASE = "relp-half-q"  # the rule set the paths were tried with (the best on the corrupt run, chosen before them)
POINTS = ["clean", "ends", "ig1", "ig2", "ig3"]
ESTIMATES = ["atp", *(f"atp@{p}" for p in POINTS), *(f"relp:{name}" for name in RELP_RULES),
             *(f"relp:{BASE}@{p}" for p in POINTS if p != "ig2"),
             *(f"relp:{name}@ig2" for name in RULE_SETS if (name, "ig2") not in RELP_PATH_OPTIONS.values())]


def speed(repeats: int) -> dict:
    """Seconds of interpscope.patch(methods='atp,relp') per RelP option (all four grids) on bench/patching.py's
    pairs."""
    import numpy as np
    import torch

    import interpscope
    from bench.patching import PAIRS

    lm = interpscope.load("smollm2-135m", device="cpu")
    before = os.getloadavg()
    out: dict = {"model": lm.name, "command": " ".join([Path(sys.executable).name, *sys.argv]),
                 "threads": torch.get_num_threads(), "repeats": repeats, "pairs": {}}
    for name, (clean, corrupt, answer, wrong) in PAIRS.items():
        entry: dict = {}
        for rules in [BASE, *RELP_PATH_OPTIONS]:
            times: dict[str, list[float]] = {"atp": [], "relp": []}
            for _ in range(repeats):
                result = interpscope.patch(lm, clean, corrupt, answer=answer, wrong=wrong, methods="atp,relp",
                                           relp_rules=rules)
                for method in times:
                    times[method].append(result.seconds[method])
            entry["tokens"] = len(result.clean_tokens)
            entry.setdefault("atp_all_grids_seconds", []).extend(times["atp"])
            entry[f"relp:{rules}_all_grids_seconds"] = {"best": min(times["relp"]),
                                                        "median": float(np.median(times["relp"])),
                                                        "all": times["relp"]}
        atp = entry.pop("atp_all_grids_seconds")
        entry["atp_all_grids_seconds"] = {"best": min(atp), "median": float(np.median(atp))}
        out["pairs"][name] = entry
    out["load_average_before"], out["load_average_after"] = before, os.getloadavg()
    return out


if __name__ == "__main__":
    if "--speed" in sys.argv:
        import argparse

        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--speed", action="store_true")
        parser.add_argument("--repeats", type=int, default=5)
        print(json.dumps(speed(parser.parse_args().repeats), indent=2))
    else:
        evaluate(ESTIMATES, __doc__.splitlines()[0])
