"""Faithfulness on held-out text: ABPC of every relevance method on the shipped prompt set (assets/prompts/
heldout-v1.jsonl), with seeded bootstrap 95% intervals, under the zero, pad and mean deletion baselines, beside a
random-order control; the model's accuracy on the set; the diagnosis of AttnLRP's rank (softmax share, baseline,
sink positions). Prints one JSON object (settings, CPU and wall seconds, load average before and after).

Each finished prompt is appended to --rows (JSONL), so a run cut short resumes with the same command and
--summarize-only builds the report from the rows written so far.

Run: OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/faithfulness.py [--limit 20] [--out FILE]
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

import torch  # noqa: E402

from interpscope.relevance.heldout import (  # noqa: E402
    DEFAULT_IG_STEPS,
    HeldoutResult,
    HeldoutSettings,
    accuracy,
    choose,
    labels_for,
    load_set,
    run_heldout,
    summarize,
)
from interpscope.results import to_json, to_plain  # noqa: E402


def load_rows(path: Path | None) -> list[dict]:
    if path is None or not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="heldout")
    parser.add_argument("--limit", type=int, default=None, help="first N prompts (every category in turn)")
    parser.add_argument("--ig-steps", type=int, default=DEFAULT_IG_STEPS)
    parser.add_argument("--curve-steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--rows", type=Path, default=None, help="JSONL of finished prompts (appended; resumed)")
    parser.add_argument("--summarize-only", action="store_true", help="report from --rows without computing")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    parser.add_argument("--start", type=int, default=0,
                        help="begin at this prompt of the interleaved order (a second worker, its own --rows)")
    parser.add_argument("--merge", type=Path, nargs="*", default=[],
                        help="with --summarize-only: more row files (other workers) to merge, first one wins")
    args = parser.parse_args()
    load_before = os.getloadavg()
    prompts = choose(load_set(args.set), limit=args.limit)
    done = load_rows(args.rows)
    seen = {r["id"] for r in done}
    for extra in args.merge:
        for row in load_rows(extra):
            if row["id"] not in seen:
                done.append(row)
                seen.add(row["id"])
    if args.start and not args.summarize_only:
        prompts = prompts[args.start:] + prompts[:args.start]
    wall, cpu = time.perf_counter(), time.process_time()
    if args.summarize_only:  # no model needed: methods and baselines are the rows' own
        if not done:
            raise SystemExit("--summarize-only needs --rows with finished prompts.")
        baselines = list(done[0]["abpc"])
        methods = [m for m in done[0]["abpc"][baselines[0]] if m != "random"]
        settings = HeldoutSettings(methods=methods, baselines=baselines, ig_steps=args.ig_steps,
                                   curve_steps=args.curve_steps, seed=args.seed, bootstrap=args.bootstrap)
        model_name = "smollm2-135m"
        ids = {r["id"] for r in done}
        by_id = {p["id"]: p for p in prompts}  # the set's own model check (a run may predate it)
        rows = [dict(r, model_correct=by_id[r["id"]].get("model_correct")) for r in done if r["id"] in by_id]
        table, fixed, minus, diagnosis, sentence = summarize(rows, settings, labels_for(settings))
        result = HeldoutResult(model=model_name, set=args.set, settings=settings, rows=rows,
                               accuracy=accuracy([p for p in prompts if p["id"] in ids]), table=table,
                               fixed_sinks_table=fixed, attnlrp_minus=minus, diagnosis=diagnosis, sentence=sentence,
                               seconds=0.0, cpu_seconds=0.0, labels=labels_for(settings))
    else:
        from interpscope.models import load_model

        lm = load_model("smollm2-135m", device=os.environ.get("BENCH_DEVICE", "cpu"))
        model_name = lm.name
        handle = args.rows.open("a", encoding="utf-8") if args.rows else None

        def keep(row: dict) -> None:
            if handle is not None:
                handle.write(json.dumps(to_plain(row)) + "\n")
                handle.flush()

        def progress(finished: int, total: int) -> None:
            print(f"{finished}/{total} prompts, {time.process_time() - cpu:.0f} s CPU, "
                  f"{time.perf_counter() - wall:.0f} s wall, load {os.getloadavg()[0]:.1f}", file=sys.stderr,
                  flush=True)

        result = run_heldout(lm, prompts, ig_steps=args.ig_steps, curve_steps=args.curve_steps, seed=args.seed,
                             bootstrap=args.bootstrap, set_name=args.set, progress=progress, done=done, on_row=keep)
        if handle is not None:
            handle.close()
    report = {"bench": "faithfulness-heldout", "model": model_name,
              "device": os.environ.get("BENCH_DEVICE", "cpu"),
              "torch_threads": torch.get_num_threads(), "prompts": len(result.rows), "set_prompts": len(prompts),
              "model_accuracy_on_the_whole_set": accuracy(load_set(args.set)),
              "resumed_rows": len(done), "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "cpu_seconds_this_run": time.process_time() - cpu, "wall_seconds_this_run": time.perf_counter() - wall,
              "cpu_seconds_per_new_prompt": ((time.process_time() - cpu) / max(1, len(result.rows) - len(done))),
              "result": result}
    text = to_json(report)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
