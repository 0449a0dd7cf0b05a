"""How well attribution patching (AtP, gradients) and relevance patching (RelP, LRP) track real activation patching
on the bundled SmolLM2, for IOI-style and greater-than prompt pairs (issue 26's target: RelP r >= 0.9 on residual
stream and attention outputs). bench/patching_rules.py runs the same comparison for every RelP rule set.

Real patching (the expensive part: one forward pass per changed cell) runs once per pair: each finished pair's real
grids go to --rows (JSON lines, resumable: a run cut short goes on with the same command). Estimates (one backward
pass each) asked for later are computed against those stored real grids and appended to --estimates-log, so a new
rule set never re-runs real patching. Three agreement figures, each Pearson r between an estimate and real patching
(both normalised: 1 = clean, 0 = corrupt) over the cells the patch changes:
- per pair: r over one pair's cells;
- pooled: r over the cells of every pair of a task, concatenated (each pair's cells as they are);
- mean grid: the dataset-level figure of the AtP / RelP papers: the grids of the pairs of one template (same token
  length and the same differing positions, so positions align) averaged cell by cell, estimate against real, over
  the cells any of them changes. Only templates with at least two pairs get one.

Run: nice -n 10 .venv/bin/python bench/relp_agreement.py [--pairs 3] [--only ioi] [--kinds resid,attn,mlp]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from interpscope.capture import model_lock  # noqa: E402
from interpscope.patching.attribution import DEFAULT_RELP_RULES, approximate_grids, pearson  # noqa: E402
from interpscope.patching.patching import changed, real_grids  # noqa: E402
from interpscope.patching.run import Prepared, prepare  # noqa: E402
from interpscope.resume import appending, read_log  # noqa: E402

KINDS = ["resid", "attn"]  # the target kinds; --kinds adds mlp
ROWS = Path("/tmp/patching_rules_rows.jsonl")  # real grids, shared with bench/patching_rules.py
ESTIMATES_LOG = Path("/tmp/patching_rules_estimates.jsonl")  # estimates added against stored real grids
CHOSEN_ON = 3  # rule sets and paths were chosen on the first 3 pairs of each task; the later ones are held out
PAIRS = {  # the first three of each task were chosen before any rule set was compared; the rest came later (held out)
    "ioi": [
        ("When Mary and John went to the store, John gave a drink to",
         "When Mary and John went to the store, Mary gave a drink to", " Mary", " John"),
        ("After John and Mary went to the park, Mary gave a ball to",
         "After John and Mary went to the park, John gave a ball to", " John", " Mary"),
        ("Then, Tom and Anna had a long argument. Afterwards Tom said to",
         "Then, Tom and Anna had a long argument. Afterwards Anna said to", " Anna", " Tom"),
        ("When Anna and Tom went to the beach, Tom gave a book to",
         "When Anna and Tom went to the beach, Anna gave a book to", " Anna", " Tom"),
        ("After Sarah and James went to the office, James gave a pen to",
         "After Sarah and James went to the office, Sarah gave a pen to", " Sarah", " James"),
        # 6-8: other templates and names, added with the clean-run / two-point RelP variants (held out from them)
        ("Then, Lisa and David had a quick lunch. Afterwards David handed the menu to",
         "Then, Lisa and David had a quick lunch. Afterwards Lisa handed the menu to", " Lisa", " David"),
        ("While Emma and Peter were at the station, Peter sent a letter to",
         "While Emma and Peter were at the station, Emma sent a letter to", " Emma", " Peter"),
        ("When Kate and Mark arrived at the school, Mark showed a photo to",
         "When Kate and Mark arrived at the school, Kate showed a photo to", " Kate", " Mark"),
    ],
    "greater-than": [
        ("The war lasted from the year 1732 to the year 17", "The war lasted from the year 1701 to the year 17",
         None, None),
        ("The strike lasted from the year 1654 to the year 16", "The strike lasted from the year 1601 to the year 16",
         None, None),
        ("The deal lasted from the year 1843 to the year 18", "The deal lasted from the year 1801 to the year 18",
         None, None),
        ("The trip lasted from the year 1567 to the year 15", "The trip lasted from the year 1501 to the year 15",
         None, None),
        ("The reign lasted from the year 1476 to the year 14", "The reign lasted from the year 1401 to the year 14",
         None, None),
        ("The siege lasted from the year 1389 to the year 13", "The siege lasted from the year 1301 to the year 13",
         None, None),
        ("The drought lasted from the year 1925 to the year 19",
         "The drought lasted from the year 1901 to the year 19", None, None),
    ],
}
Pair = tuple[str, str, str | None, str | None]


def estimate_grids(lm, ready: Prepared, kinds: list[str], names: list[str]) -> tuple[dict, dict]:
    """{name: {kind: normalised grid}} and {name: seconds} for 'atp' and 'relp:<rules>', each with an optional
    '@<path>' (a key of interpscope.patching.attribution.PATHS: where the coefficients are taken; without it the
    corrupt run, or a RelP option's own path). The caller holds the lock."""
    grids, seconds = {}, {}
    for name in names:
        start = time.perf_counter()
        estimate, _, path = name.partition("@")
        method, _, rules = estimate.partition(":")
        raw = approximate_grids(lm.model, lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean,
                                ready.corrupt, kinds, method, rules or DEFAULT_RELP_RULES, ready.pair.clean_ids,
                                path or None)
        grids[name] = {kind: grid / ready.span for kind, grid in raw.items()}
        seconds[name] = time.perf_counter() - start
    return grids, seconds


def real_row(lm, task: str, pair: Pair, kinds: list[str], names: list[str]) -> dict:
    """One pair: its real grids and the named estimates, each kept over the changed cells (row-major), with the
    changed mask itself."""
    clean, corrupt, answer, wrong = pair
    started = time.perf_counter()
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, "logit-diff", answer, wrong, None, heads="heads" in kinds)
        start = time.perf_counter()
        real = real_grids(lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean, ready.corrupt, kinds)
        seconds = {"real": time.perf_counter() - start}
        estimates, more = estimate_grids(lm, ready, kinds, names)
        masks = {kind: changed(lm.adapter, kind, ready.clean, ready.corrupt) for kind in kinds}
    row: dict = {"task": task, "clean": clean, "corrupt": corrupt, "tokens": ready.pair.n_tokens,
                 "clean_value": ready.clean_value, "corrupt_value": ready.corrupt_value,
                 "seconds": {**seconds, **more}, "kinds": {}}
    for kind, mask in masks.items():
        row["kinds"][kind] = {"cells": int(mask.sum()), "changed": mask.astype(int).tolist(),
                              "real": ((real[kind] - ready.corrupt_value) / ready.span)[mask].tolist(),
                              **{name: estimates[name][kind][mask].tolist() for name in names}}
    row["wall_seconds"] = time.perf_counter() - started
    return row


def resume_pairs(path: Path, todo: list[tuple[str, Pair]], run: Callable[[str, Pair], dict]) -> list[dict]:
    """The rows logged at path, plus one run(task, pair) appended for every pair of todo not logged yet (the load
    average beside each): what both benches resume with."""
    rows = read_log(path)
    seen = {(r["clean"], r["corrupt"]) for r in rows}
    with appending(path) as append:
        for task, pair in todo:
            if (pair[0], pair[1]) in seen:
                continue
            row = run(task, pair)
            row["load_average"] = os.getloadavg()
            append(row)
            rows.append(row)
            print(f"{task}: {pair[0]!r} done in {row['wall_seconds']:.0f} s", file=sys.stderr)
    return rows


def pair_of(row: dict) -> Pair:
    return next(p for pairs in PAIRS.values() for p in pairs if (p[0], p[1]) == (row["clean"], row["corrupt"]))


def complete(lm, rows: list[dict], names: list[str], log: Path) -> None:
    """Give every row each named estimate and its changed masks: from the row itself, from the log, or computed now
    against the row's stored real grids (and logged). The recomputed clean and corrupt metrics must equal the
    stored ones up to float32 rounding (rows from before the two-token unembedding read them through the whole
    vocabulary: up to 1.2e-5 apart on SmolLM2), else the stored real grids are not of this model."""
    logged = {(e["clean"], e["corrupt"], e["estimate"]): e["kinds"] for e in read_log(log)}
    with appending(log) as append:
        for row in rows:
            kinds = list(row["kinds"])
            key = (row["clean"], row["corrupt"])
            missing = [n for n in names if n not in row["kinds"][kinds[0]] and (*key, n) not in logged]
            if missing or ("changed" not in row["kinds"][kinds[0]] and (*key, "changed") not in logged):
                clean, corrupt, answer, wrong = pair_of(row)
                with model_lock(lm):
                    ready = prepare(lm, clean, corrupt, "logit-diff", answer, wrong, None, heads="heads" in kinds)
                    masks = {kind: changed(lm.adapter, kind, ready.clean, ready.corrupt) for kind in kinds}
                    grids, seconds = estimate_grids(lm, ready, kinds, missing)
                if not np.allclose([ready.clean_value, ready.corrupt_value], [row["clean_value"], row["corrupt_value"]],
                                   rtol=1e-5, atol=1e-4):
                    raise SystemExit(f"stored row {row['clean']!r} is of another model state: its metrics differ")
                new = {"changed": {kind: mask.astype(int).tolist() for kind, mask in masks.items()}}
                new |= {name: {kind: grids[name][kind][masks[kind]].tolist() for kind in kinds} for name in missing}
                for name, by_kind in new.items():
                    entry = {"clean": row["clean"], "corrupt": row["corrupt"], "estimate": name, "kinds": by_kind,
                             "seconds": seconds.get(name), "load_average": os.getloadavg()}
                    append({k: v for k, v in entry.items() if v is not None})
                    logged[(*key, name)] = by_kind
            for name in ["changed", *names]:
                for kind in kinds:
                    row["kinds"][kind].setdefault(name, (logged.get((*key, name)) or {}).get(kind))
                    if row["kinds"][kind][name] is None:
                        raise SystemExit(f"no {name} for {row['clean']!r} {kind}")
            for kind in kinds:
                assert int(np.sum(row["kinds"][kind]["changed"])) == len(row["kinds"][kind]["real"])


def everything(n: int) -> np.ndarray:
    return np.ones(n, dtype=bool)


def _full(block: dict, name: str) -> np.ndarray:
    mask = np.asarray(block["changed"], dtype=bool)
    grid = np.zeros(mask.shape)
    grid[mask] = block[name]
    return grid


def _pooled(blocks: list[dict], name: str) -> float | None:
    real = np.concatenate([b["real"] for b in blocks])
    return pearson(np.concatenate([b[name] for b in blocks]), real, everything(real.size))


def scores(rows: list[dict], names: list[str]) -> dict:
    """Per task and kind: the pooled r of each estimate (over all pairs and over the held-out ones) and its per-pair r
    (in the order of PAIRS, numbered from 1); per template with >= 2 pairs: the mean-grid r."""
    out: dict = {"by_task": {}, "mean_grid": {}}
    kinds = sorted({kind for row in rows for kind in row["kinds"]}, key=["resid", "attn", "mlp", "heads"].index)
    for task in PAIRS:
        ordered = sorted((r for r in rows if r["task"] == task), key=lambda r: PAIRS[task].index(pair_of(r)))
        index = [PAIRS[task].index(pair_of(r)) + 1 for r in ordered]
        for kind in kinds:
            mine = [r["kinds"][kind] for r in ordered if kind in r["kinds"]]
            if not mine:
                continue
            held = [b for b, i in zip(mine, index, strict=True) if i > CHOSEN_ON]
            out["by_task"].setdefault(task, {})[kind] = {
                "pairs": len(mine), "pair_numbers": index, "cells": int(sum(len(b["real"]) for b in mine)),
                "r_pooled": {n: _pooled(mine, n) for n in names},
                "r_pooled_held_out": {n: _pooled(held, n) for n in names} if held else None,
                "r_per_pair": {n: [pearson(np.asarray(b[n]), np.asarray(b["real"]), everything(len(b["real"])))
                                   for b in mine] for n in names}}
    templates: dict[tuple, list[dict]] = {}
    for row in rows:
        differing = tuple(int(i) for i in np.flatnonzero(np.asarray(row["kinds"]["resid"]["changed"])[0])) \
            if "resid" in row["kinds"] else ()
        templates.setdefault((row["task"], row["tokens"], differing), []).append(row)
    for (task, tokens, differing), members in templates.items():
        if len(members) < 2:
            continue
        entry: dict = {"task": task, "tokens": tokens, "differing_positions": list(differing), "pairs": len(members),
                       "prompts": [m["clean"] for m in members]}
        for kind in kinds:
            blocks = [m["kinds"][kind] for m in members if kind in m["kinds"]]
            union = np.any([np.asarray(b["changed"], dtype=bool) for b in blocks], axis=0)
            real = np.mean([_full(b, "real") for b in blocks], axis=0)
            entry[kind] = {"cells": int(union.sum()),
                           "r": {n: pearson(np.mean([_full(b, n) for b in blocks], axis=0), real, union)
                                 for n in names}}
        out["mean_grid"][f"{task}, {tokens} tokens, differing at {list(differing)}"] = entry
    return out


def evaluate(names: list[str], description: str) -> None:
    """The command line of both benches: resume the real grids, complete the estimates, print the scores."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=Path, default=ROWS, help=f"real grids, JSON lines (default {ROWS})")
    parser.add_argument("--estimates-log", type=Path, default=ESTIMATES_LOG,
                        help=f"estimates added later, JSON lines (default {ESTIMATES_LOG})")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per task (default 3)")
    parser.add_argument("--only", choices=sorted(PAIRS))
    parser.add_argument("--kinds", default=",".join(KINDS), help="components (default resid,attn)")
    args = parser.parse_args()
    import torch

    import interpscope

    lm = interpscope.load("smollm2-135m", device="cpu")
    kinds = args.kinds.split(",")
    load_before = os.getloadavg()
    todo = [(task, pair) for task, pairs in PAIRS.items() if args.only in (None, task) for pair in pairs[:args.pairs]]
    rows = resume_pairs(args.rows, todo, lambda task, pair: real_row(lm, task, pair, kinds, names))
    wanted = {(pair[0], pair[1]) for _, pair in todo}
    rows = [r for r in rows if (r["clean"], r["corrupt"]) in wanted and set(kinds) <= set(r["kinds"])]
    complete(lm, rows, names, args.estimates_log)
    print(json.dumps({"model": lm.name, "command": " ".join([Path(sys.executable).name, *sys.argv]),
                      "threads": torch.get_num_threads(), "estimates": names, **scores(rows, names),
                      "pairs": [{k: v for k, v in r.items() if k != "kinds"} for r in rows],
                      "load_average_before": load_before, "load_average_after": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    evaluate(["atp", f"relp:{DEFAULT_RELP_RULES}", "relp:attnlrp"], __doc__.splitlines()[0])
