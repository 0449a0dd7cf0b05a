"""Issue 27's ablation criterion read per prompt: "ablating the strongest supernode moves the logit as the graph
predicts (the correlation of predicted and actual changes over 20 ablations)". Here the 20 ablations are the
strongest supernode of each of 20 prompts; bench/graph_ablation_prompts.py reads it the other way (the 20 strongest
supernodes of one prompt, which also ranks weaker nodes).

Prompts, fixed before any was run: the shipped held-out set (assets/prompts/heldout-v1.jsonl) where the bundled model
predicts the expected token, taken round-robin over its categories in file order until there are `--prompts` (20).
Per prompt: the default graph (build_graph's defaults, the model's top token), supernodes by decoder direction at
the page's 0.5 (singletons included); the strongest supernode (largest summed |influence|) and the strongest single
feature node are ablated in the real model (ablation_check with n = 1), beside one random active feature (the
control). Pearson r over the prompts of predicted vs actual, for the prediction through the live final norm (r),
the all-linear one (r_linear) and the pruned graph's edges (r_pruned); with each prompt's row, the load average.

Run: nice -n 10 .venv/bin/python bench/graph_strongest_supernode.py [--prompts 20] > out.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def chosen_prompts(n: int) -> list[dict]:
    """Round-robin over the categories (file order within each) of the prompts the model gets right."""
    rows = [json.loads(line) for line in (ROOT / "assets/prompts/heldout-v1.jsonl").read_text().splitlines()
            if line.strip()]
    by_category: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("model_correct"):
            by_category.setdefault(row["category"], []).append(row)
    order = [row for group in zip_longest(*by_category.values()) for row in group if row is not None]
    return order[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args()

    import interpscope
    from interpscope.graphs.build import build_graph
    from interpscope.graphs.grouping import group_by_decoder
    from interpscope.graphs.interventions import GraphRun, ablation_check, pearson
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    lm = interpscope.load("smollm2-135m", device="cpu")
    folder = default_transcoder_set(lm.name)
    if folder is None:
        print("no shipped transcoder set for smollm2-135m", file=sys.stderr)
        return 2
    tset = load_transcoder_set(folder, lm=lm)
    load_start, start = os.getloadavg(), time.perf_counter()
    rows = []
    for prompt in chosen_prompts(args.prompts):
        load, began = os.getloadavg(), time.perf_counter()
        graph = build_graph(lm, tset, prompt["text"])
        prepared = GraphRun(lm, tset, graph)
        groups = group_by_decoder(graph.nodes, tset, 0.5, singletons=True)
        supers = ablation_check(lm, tset, graph, n=1, groups=groups, prepared=prepared, seed=len(rows))
        singles = ablation_check(lm, tset, graph, n=1, prepared=prepared, seed=len(rows))

        def pick(check, which: str) -> dict:
            row = next(r for r in check.rows if r["set"] == which)
            return {k: row[k] for k in ("nodes", "label", "predicted", "predicted_linear", "predicted_pruned",
                                        "predicted_real_linear", "actual", "last_layer") if k in row}

        row = {"id": prompt["id"], "category": prompt["category"], "text": prompt["text"],
               "target": graph.target["token"], "p": graph.target["probability"], "tokens": len(graph.tokens),
               "supernode": pick(supers, "strongest"), "single": pick(singles, "strongest"),
               "control": pick(singles, "random"), "seconds": time.perf_counter() - began, "load_start": load}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("id", "target", "supernode", "single", "control", "seconds")}),
              file=sys.stderr, flush=True)

    def r(kind: str, key: str) -> float | None:
        return pearson([row[kind][key] for row in rows], [row[kind]["actual"] for row in rows])

    def beyond(kind: str) -> dict:
        """r over the prompts whose ablated nodes are not all last-block features (those are exact by
        construction), and how many there are."""
        rest = [row[kind] for row in rows if not row[kind].get("last_layer")]
        return {"n": len(rest), "r": pearson([x["predicted"] for x in rest], [x["actual"] for x in rest]),
                "r_real_linear": pearson([x["predicted_real_linear"] for x in rest], [x["actual"] for x in rest])}

    summary = {kind: {"r": r(kind, "predicted"), "r_linear": r(kind, "predicted_linear"),
                      "r_real_linear": r(kind, "predicted_real_linear"),  # the real model's estimate, not the graph
                      "beyond_last_layer": beyond(kind),
                      "r_pruned": r(kind, "predicted_pruned"),
                      "median_abs_error": sorted(abs(row[kind]["predicted"] - row[kind]["actual"])
                                                 for row in rows)[len(rows) // 2],
                      "sign_agreement": sum((row[kind]["predicted"] > 0) == (row[kind]["actual"] > 0)
                                            for row in rows) / len(rows)}
               for kind in ("supernode", "single", "control")}
    print(json.dumps({"model": lm.name, "transcoders": str(folder), "prompts": len(rows), "summary": summary,
                      "rows": rows, "load_average_start": load_start, "load_average_end": os.getloadavg(),
                      "seconds": time.perf_counter() - start}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
