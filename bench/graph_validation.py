"""The attribution graphs' honest validation (issue 43.5), replacing the withdrawn r >= 0.8 criterion: the ablation
check on >= 20 held-out prompts (assets/prompts/heldout-v1.jsonl, one per category in turn, none used to build the
transcoders), reporting per prompt and pooled the r of the graph, of the real model linearised under the graph's own
frozen convention with its real MLPs (the ceiling any transcoder set could reach under that convention), and of
the unconstrained real linearisation. Target: the graphs' pooled r within 0.1 of the ceiling.

Writes the check set's document (schema interpscope.graph.ablation_check_set) with the load average at start and end
to --out and prints a JSON summary line. Resumable per prompt (--work keeps each prompt's row).

Run: nice -n 10 .venv/bin/python bench/graph_validation.py --model smollm2-135m --prompts 20 \
         --out bench/reference/graph-validation-smollm2-135m-cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
ROOT = Path(__file__).resolve().parent.parent


def heldout_prompts(n: int) -> list[str]:
    """n held-out prompts, taking the categories in turn (factual, syntax, ...) so no one kind fills the set."""
    rows = [json.loads(line) for line in (ROOT / "assets/prompts/heldout-v1.jsonl").read_text().splitlines() if line]
    by_category: dict[str, list[str]] = {}
    for row in rows:
        by_category.setdefault(row["category"], []).append(row["text"])
    picked: list[str] = []
    while len(picked) < n and any(by_category.values()):
        for texts in by_category.values():
            if texts and len(picked) < n:
                picked.append(texts.pop(0))
    return picked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--transcoders", default=None, help="a set or CLT folder (default: the shipped set)")
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--ablations", type=int, default=20)
    parser.add_argument("--max-feature-nodes", type=int, default=128)
    parser.add_argument("--work", default=None, help="per-prompt rows kept here (resumable)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import interpscope
    from interpscope.graphs.check_set import AblationCheckSet, _mean, _pooled, ablation_check_set
    from interpscope.sae.transcoder_set import default_transcoder_set, load_dictionary

    lm = interpscope.load(args.model, device="cpu")
    folder = args.transcoders or default_transcoder_set(lm.name)
    tset = load_dictionary(folder, lm=lm)
    texts = heldout_prompts(args.prompts)
    work = Path(args.work or f"build/graph_validation_{lm.name}")
    work.mkdir(parents=True, exist_ok=True)
    load_start, started = os.getloadavg(), time.perf_counter()
    rows = []
    options = dict(max_feature_nodes=args.max_feature_nodes, lrp=None)
    for index, text in enumerate(texts):
        file = work / f"prompt_{index:03d}.json"
        if file.is_file():
            rows.append(json.loads(file.read_text()))
            continue
        one = ablation_check_set(lm, tset, [text], n=args.ablations, graph_options=options)
        file.write_text(json.dumps(one.rows[0]))
        rows.append(one.rows[0])
        print(json.dumps({"prompt": index, "r": one.rows[0]["r"], "r_frozen_linear": one.rows[0]["r_frozen_linear"],
                          "r_real_linear": one.rows[0]["r_real_linear"]}), flush=True)
    from interpscope.graphs.check_set import FIGURES, SCORES

    means = {k: m for k in (*FIGURES, *SCORES)
             if (m := _mean([row[k] for row in rows if row.get(k) is not None], 0)) is not None}
    result = AblationCheckSet(model=lm.name, n=args.ablations, rows=rows, means=means, pooled=_pooled(rows),
                              seconds=time.perf_counter() - started)
    document = result.to_dict()
    document["bench"] = {"transcoders": str(folder), "prompts": texts, "max_feature_nodes": args.max_feature_nodes,
                         "load_average_start": load_start, "load_average_end": os.getloadavg(),
                         "command": " ".join(sys.argv)}
    Path(args.out).write_text(json.dumps(document, indent=1))
    print(json.dumps({"summary": result.summary(), "pooled": result.pooled}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
