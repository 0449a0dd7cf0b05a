"""Which RelP rule set tracks real activation patching best on the bundled SmolLM2: every rule set of
interpscope.causal.attribution.RELP_RULES beside plain attribution patching (AtP), on the IOI-style and greater-than
pairs of bench/relp_agreement.py, per pair, pooled over a task's pairs, and as the mean grid of each template.

Real patching runs once per pair (rows kept in --rows, resumable); a rule set added later is computed against the
stored real grids (--estimates-log). Prints one JSON object with the load average before and after.

Run: nice -n 10 .venv/bin/python bench/patching_rules.py [--pairs 3] [--kinds resid,attn,mlp] [--rows FILE]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.relp_agreement import evaluate  # noqa: E402
from interpscope.causal.attribution import RELP_RULES  # noqa: E402

ESTIMATES = ["atp", *(f"relp:{name}" for name in RELP_RULES)]

if __name__ == "__main__":
    evaluate(ESTIMATES, __doc__.splitlines()[0])
