"""Which linear prediction of the ablation check's ablations tracks the real ones (issue 27: r >= 0.8 over the 20
strongest): per prompt, the graph's own prediction beside first-order estimates (the target logit's gradient at
hook_mlp_out times the removed write) of the REAL model and of the real model with each set of the replacement
model's assumptions imposed (interpscope.graphs.freeze.READOUTS: norms frozen, attention patterns frozen, both,
transcoders in place of the MLPs, all of them). Pearson r of each against the real forward pass's change, over the
20 strongest single feature nodes, over those before the last block, and over 20 random active features (the
control). One backward pass per estimate; the 40 real ablations are the ablation check's own.

If the real model's estimate tracks the ablations and an estimate with the attention patterns and norm scales
frozen does not, no graph in circuit-tracer's frozen convention can, however good its transcoders: the frozen
parts are where the prediction is lost. Prints one JSON line per prompt with the load average at start and end.

Run: nice -n 10 .venv/bin/python bench/graph_linearisations.py
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def r_over(rows: list[dict], predictions: dict[str, list[float]], keep) -> dict:
    """Pearson r of each prediction against the real change over the rows `keep` selects."""
    from interpscope.graphs.interventions import pearson

    chosen = [k for k, row in enumerate(rows) if keep(row)]
    actual = [rows[k]["actual"] for k in chosen]
    return {name: pearson([values[k] for k in chosen], actual) for name, values in predictions.items()}


def main() -> None:
    from bench.graph_ablation_prompts import PROMPTS, prepared_graphs  # the same prompts, loaded the same way
    from interpscope.graphs.freeze import READOUTS
    from interpscope.graphs.interventions import ablation_check

    for lm, tset, graph, prepared, load, start in prepared_graphs(PROMPTS):
        text = graph.text
        check = ablation_check(lm, tset, graph, n=20, prepared=prepared)
        rows = check.rows
        members = [[prepared.active_feature(node) for node in row["nodes"]] for row in rows]
        predictions = {"graph": [row["predicted"] for row in rows],
                       "real": [row["predicted_real_linear"] for row in rows]}
        for name, parts in READOUTS.items():
            predictions[f"real, {name}"] = prepared.predicted_real_linear(members, 0.0, freeze=parts)

        print(json.dumps({
            "text": text, "target": graph.target["token"], "tokens": len(graph.tokens),
            "load_start": load, "load_end": os.getloadavg(), "seconds": time.perf_counter() - start,
            "n_last_layer": check.n_last_layer,
            "r_strongest": r_over(rows, predictions, lambda row: row["set"] == "strongest"),
            "r_strongest_before_last_block": r_over(rows, predictions, lambda row: row["set"] == "strongest"
                                                    and not row.get("last_layer")),
            "r_control": r_over(rows, predictions, lambda row: row["set"] == "random")}), flush=True)


if __name__ == "__main__":
    main()
