"""Add a second training seed of a sweep to the shipped one, so the Pareto ratios get an interval over seeds (issue
45.14): the rows of SEED_SWEEP (a finished `interpscope sae sweep ... --seed S` folder with the shipped sweep's
settings but the seed) join SHIPPED's table as '<name>-seed<S>' with `seed: S`, and each SAE's train.json and
eval.json is copied under SHIPPED/seed<S>/<name>/ (no weights: the frontier weights stay the first seed's). Refuses
a sweep whose settings differ from the shipped one's in anything but the seed, and a seed already shipped.

Run: .venv/bin/python scripts/ship_sae_seed.py build/sae_sweep_seed1 assets/sae_sweeps/smollm2-135m-blocks.15-resid-post
(the seed sweep: OMP_NUM_THREADS=1 nice -n 15 .venv/bin/interpscope sae sweep --model smollm2-135m --hook
blocks.15.hook_resid_post --width 576 --tokens 1000000 --cache-tokens 300000 --eval-tokens 4096 --save-dtype float16
--sparsity 1,2,4,8 --k 8,16,32,64 --archs relu,gated --seed 1 --workers 1 --out build/sae_sweep_seed1)
"""
from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))

from interpscope.sae.sweep import EVAL_FILE, SWEEP_FILE, TABLE_CSV, TABLE_JSON, TRAIN_FILE  # noqa: E402


def main(source: Path, target: Path) -> None:
    mine = json.loads((source / SWEEP_FILE).read_text(encoding="utf-8"))["settings"]
    shipped = json.loads((target / SWEEP_FILE).read_text(encoding="utf-8"))["settings"]
    differ = sorted(k for k in set(mine) | set(shipped) if k != "seed" and mine.get(k) != shipped.get(k))
    if differ:
        raise SystemExit(f"The seed sweep's settings differ from the shipped sweep's in {', '.join(differ)}.")
    seed = int(mine["seed"])
    table = json.loads((target / TABLE_JSON).read_text(encoding="utf-8"))
    if seed == int(shipped.get("seed", 0)) or any(int(r.get("seed") or 0) == seed for r in table["rows"]):
        raise SystemExit(f"Seed {seed} is already in {target}.")
    extra = json.loads((source / TABLE_JSON).read_text(encoding="utf-8"))["rows"]
    for row in extra:
        folder = Path(f"seed{seed}") / row["folder"]
        (target / folder).mkdir(parents=True, exist_ok=True)
        for name in (TRAIN_FILE, EVAL_FILE):
            shutil.copy2(source / row["folder"] / name, target / folder / name)
        table["rows"].append({**row, "name": f"{row['name']}-seed{seed}", "folder": str(folder), "seed": seed})
    (target / TABLE_JSON).write_text(json.dumps(table, indent=1), encoding="utf-8")
    from interpscope.sae.sweep_docs import SweepTable

    tidy = SweepTable.from_dict(table).tidy()  # the CSV the sweep writes: model, hook, target_hook, then the row
    header = (target / TABLE_CSV).read_text(encoding="utf-8").splitlines()[0].split(",")  # the shipped columns first
    columns = list(dict.fromkeys([*header, *(key for row in tidy for key in row)]))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if row.get(k) is None else row[k]) for k in columns} for row in tidy)
    (target / TABLE_CSV).write_text(out.getvalue(), encoding="utf-8")
    print(f"{len(extra)} SAEs of seed {seed} -> {target} ({len(table['rows'])} rows)")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
