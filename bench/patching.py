"""Time activation patching on the bundled SmolLM2 (issue 26's budgets, 2-core CPU, <= 32 tokens): the full residual
grid (30 layers + final x positions) <= 30 s; AtP and RelP grids (all four component kinds) <= 2 s each.

Two pairs: the page's IOI default (the prompts differ at one late name, so only positions from there on are run) and
a 32-token pair differing at its second word (nearly every cell of the grid changes: the worst case). Prints one
JSON object with each timing, the cells run, torch's thread count and the load average before and after.

Run: nice -n 10 .venv/bin/python bench/patching.py [--pairs ioi]
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

PAIRS = {
    "ioi": ("When Mary and John went to the store, John gave a drink to",
            "When Mary and John went to the store, Mary gave a drink to", " Mary", " John"),
    "early-difference-32": (
        "Yesterday Mary walked to the old market in town, bought fresh bread and cheese, met her friend John there, "
        "and gave the bread to",
        "Yesterday John walked to the old market in town, bought fresh bread and cheese, met her friend John there, "
        "and gave the bread to", " John", " Mary"),
}


def main() -> None:
    import argparse

    import interpscope

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"which pairs (default {','.join(PAIRS)})")
    chosen = parser.parse_args().pairs.split(",")

    lm = interpscope.load("smollm2-135m", device="cpu")
    before = os.getloadavg()
    out: dict = {"model": lm.name, "threads": torch.get_num_threads(), "pairs": {}}
    for name, (clean, corrupt, answer, wrong) in PAIRS.items():
        if name not in chosen:
            continue
        started = time.perf_counter()
        real = interpscope.patch(lm, clean, corrupt, answer=answer, wrong=wrong, components="resid", methods="real")
        wall = time.perf_counter() - started
        quick = interpscope.patch(lm, clean, corrupt, answer=answer, wrong=wrong, methods="atp,relp")
        out["pairs"][name] = {
            "tokens": len(real.clean_tokens),
            "resid_cells_run": int(np.asarray(real.grids["resid"]["changed"]).sum()),
            "resid_cells": int(np.asarray(real.grids["resid"]["changed"]).size),
            "real_resid_grid_seconds": real.seconds["real"], "real_resid_wall_seconds": wall,
            "atp_all_grids_seconds": quick.seconds["atp"], "relp_all_grids_seconds": quick.seconds["relp"],
            "two_recording_passes_seconds": quick.seconds["record"],
            "final_residual_last_position": float(np.asarray(real.grids["resid"]["real"])[-1, -1])}
        print(f"{name}: done", file=sys.stderr)
    out["load_average_before"], out["load_average_after"] = before, os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
