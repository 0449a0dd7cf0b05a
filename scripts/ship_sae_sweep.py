"""Copy a finished sweep into assets/: its table (JSON + CSV) and settings, every SAE's train.json and eval.json,
and the weights (cfg.json + sae_weights.safetensors + history.json) of the SAEs on a frontier (L0 vs loss recovered
or L0 vs FVU). Usage: python scripts/ship_sae_sweep.py SWEEP_DIR ASSET_DIR"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from interpscope.sae.pareto import pareto_analysis
from interpscope.sae.sweep import EVAL_FILE, SWEEP_FILE, TABLE_CSV, TABLE_JSON, TRAIN_FILE, load_table

WEIGHTS = ("cfg.json", "sae_weights.safetensors", "history.json")


def main(source: Path, target: Path) -> None:
    table = load_table(source)
    analysis = pareto_analysis(table)
    on_front = {name for per_metric in analysis.frontiers.values() for names in per_metric.values() for name in names}
    target.mkdir(parents=True, exist_ok=True)
    for name in (TABLE_JSON, TABLE_CSV):
        shutil.copy2(source / name, target / name)
    settings = json.loads((source / SWEEP_FILE).read_text(encoding="utf-8"))  # the grid of the rows shipped
    settings["grid"] = [point for point in settings["grid"] if point["name"] in {r["name"] for r in table.rows}]
    (target / SWEEP_FILE).write_text(json.dumps(settings, indent=1), encoding="utf-8")
    for row in table.rows:
        folder = target / row["folder"]
        folder.mkdir(exist_ok=True)
        files = (TRAIN_FILE, EVAL_FILE) + (WEIGHTS if row["name"] in on_front else ())
        for name in files:
            shutil.copy2(source / row["folder"] / name, folder / name)
    print(f"{len(table.rows)} SAEs, weights of {len(on_front)} frontier SAEs -> {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
