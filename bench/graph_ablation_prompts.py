"""The ablation check (issue 27: r >= 0.8 of predicted vs actual logit changes over the 20 strongest ablations) on
more prompts than bench/graph_interventions.py's one: per prompt, singles and supernodes (decoder grouping at the
page's 0.5, singletons included), r (prediction through the live final norm), r_linear, r_pruned and the control,
and how many of the strongest are last-block features (exact by construction) with r over the others.
Prints one JSON line per prompt with the load average at start and end.

Run: nice -n 10 .venv/bin/python bench/graph_ablation_prompts.py
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPTS = ("The Eiffel Tower is in the city of", "The capital of France is",
           "When Mary and John went to the store, John gave a drink to")


def prepared_graphs(prompts=PROMPTS):
    """Per prompt on SmolLM2 with the shipped transcoders: (lm, tset, graph, its GraphRun, the load average and the
    perf_counter at the prompt's start). Shared with bench/graph_linearisations.py."""
    import interpscope
    from interpscope.graphs.build import build_graph
    from interpscope.graphs.interventions import GraphRun
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    lm = interpscope.load("smollm2-135m", device="cpu")
    folder = default_transcoder_set(lm.name)
    if folder is None:
        raise SystemExit("no shipped transcoder set for smollm2-135m")
    tset = load_transcoder_set(folder, lm=lm)
    for text in prompts:
        load, start = os.getloadavg(), time.perf_counter()
        graph = build_graph(lm, tset, text)
        yield lm, tset, graph, GraphRun(lm, tset, graph), load, start


def main() -> None:
    from interpscope.graphs.grouping import group_by_decoder
    from interpscope.graphs.interventions import ablation_check

    for lm, tset, graph, prepared, load, start in prepared_graphs():
        text = graph.text
        singles = ablation_check(lm, tset, graph, n=20, prepared=prepared)
        groups = group_by_decoder(graph.nodes, tset, 0.5, singletons=True)
        supers = ablation_check(lm, tset, graph, n=20, groups=groups, prepared=prepared)
        keys = ("r", "r_linear", "r_pruned", "r_control", "n_last_layer", "r_beyond_last_layer")
        print(json.dumps({"text": text, "target": graph.target, "tokens": len(graph.tokens), "load_start": load,
                          "load_end": os.getloadavg(), "seconds": time.perf_counter() - start,
                          "singles": {k: getattr(singles, k) for k in keys},
                          "supernodes": {k: getattr(supers, k) for k in keys},
                          "members": [len(r["nodes"]) for r in supers.rows if r["set"] == "strongest"]}), flush=True)


if __name__ == "__main__":
    main()
