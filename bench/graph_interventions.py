"""Time interventions on an attribution graph of the bundled SmolLM2 (issue 27's budgets, 2-core CPU): each
intervention (one real forward pass, plus the unpruned graph's linear replay) <= 3 s; page interactions on a built
graph (figure, automatic supernodes, merged view) <= 0.3 s. Also the ablation check: the 20 strongest feature nodes
ablated one by one, Pearson r of predicted vs actual logit changes (target >= 0.8), beside 20 random feature nodes
(the control).

Transcoders: the set shipped for the model (assets/transcoders/smollm2-135m), or --transcoders DIR, or --random WIDTH
(random transcoders: a control, they explain nothing). Prints one JSON object with every timing, r, the transcoders
used, torch's thread count and the load average before and after.

The ablation check is also run over supernodes (the automatic decoder grouping at the page's default threshold,
singletons included, so every feature node is in one: the 20 strongest by summed |influence|), and, as labelled
DIAGNOSTICS beside the real forward pass, against readouts of the real model with parts of the replacement model
imposed (interpscope.graphs.freeze.READOUTS: final norm frozen, every norm frozen, attention frozen, attention and
norms frozen = circuit-tracer's convention, MLPs replaced by transcoders + constant error, and all of them = the
local replacement model): where the prediction's error comes from. "decomposition" lists the 20 strongest singles.
`r` uses the graph's prediction through the live final norm, `r_linear` the all-linear one (final norm frozen).

Run: nice -n 10 .venv/bin/python bench/graph_interventions.py [--text T] [--transcoders DIR | --random 1024]
     [--max-feature-nodes N] [--threshold 0.5] [--no-readouts]
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

TEXT = "The Eiffel Tower is in the city of"


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    """The median wall time of `repeat` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out


def main() -> None:
    import argparse

    import interpscope
    from interpscope.figures.graphs import graph_figure, merge_groups
    from interpscope.graphs.build import build_graph
    from interpscope.graphs.defaults import DEFAULT_MAX_FEATURE_NODES
    from interpscope.graphs.freeze import READOUTS
    from interpscope.graphs.grouping import group_by_decoder, group_edges
    from interpscope.graphs.interventions import GraphRun, ablation_check, edge_heads, intervene
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set, random_transcoder_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--transcoders", help="a transcoder set folder (default: the shipped set)")
    parser.add_argument("--random", type=int, help="use random transcoders of this width instead (a control)")
    parser.add_argument("--node-budget", type=int, default=80)
    parser.add_argument("--edge-budget", type=int, default=400)
    parser.add_argument("--max-feature-nodes", type=int, default=DEFAULT_MAX_FEATURE_NODES)
    parser.add_argument("--threshold", type=float, default=0.5, help="decoder-cosine threshold of the supernodes")
    parser.add_argument("--no-readouts", action="store_true", help="skip the diagnostic readouts")
    args = parser.parse_args()
    readouts = () if args.no_readouts else tuple(READOUTS)

    lm = interpscope.load("smollm2-135m", device="cpu")
    before = os.getloadavg()
    if args.random:
        tset, which = random_transcoder_set(lm, args.random, seed=0), f"random width {args.random}"
    else:
        folder = args.transcoders or default_transcoder_set(lm.name)
        if folder is None:
            raise SystemExit("no shipped transcoder set for smollm2-135m: pass --transcoders DIR or --random WIDTH")
        tset, which = load_transcoder_set(folder, lm=lm), str(folder)
    out: dict = {"model": lm.name, "transcoders": which, "width": tset.width, "text": args.text,
                 "threads": torch.get_num_threads()}
    start = time.perf_counter()
    graph = build_graph(lm, tset, args.text, node_budget=args.node_budget, edge_budget=args.edge_budget,
                        max_feature_nodes=args.max_feature_nodes)
    out["graph_seconds"] = time.perf_counter() - start
    out["max_feature_nodes"] = args.max_feature_nodes
    out.update(tokens=len(graph.tokens), nodes=len(graph.nodes), edges=len(graph.edges), target=graph.target,
               replacement_score=graph.replacement_score, completeness_score=graph.completeness_score)
    start = time.perf_counter()
    prepared = GraphRun(lm, tset, graph)
    out["prepare_seconds"] = time.perf_counter() - start
    features = sorted((n for n in graph.nodes if n["kind"] == "feature" and not n.get("sink")),
                      key=lambda n: -abs(n.get("influence") or 0.0))
    if not features:
        out["note"] = ("no feature node survived pruning (error nodes carry the logit: transcoders that explain "
                       "nothing); nothing to intervene on")
        out["load_average_before"], out["load_average_after"] = before, os.getloadavg()
        print(json.dumps(out, indent=2))
        return
    singles = []
    for node in features[:5]:
        result = intervene(lm, tset, graph, [node["id"]], prepared=prepared)
        singles.append({"node": node["id"], "seconds": result.seconds, "predicted": result.predicted,
                        "predicted_pruned": result.predicted_pruned, "actual": result.actual})
    out["interventions"] = singles
    out["seconds_per_intervention_max"] = max(s["seconds"] for s in singles)
    steer = intervene(lm, tset, graph, [features[0]["id"]], mode="steer", scale=2.0, prepared=prepared)
    out["steer_x2"] = {"seconds": steer.seconds, "predicted": steer.predicted, "actual": steer.actual}
    groups = group_by_decoder(graph.nodes, tset, 0.3)
    group = max(groups, key=lambda g: len(g.members)) if groups else None
    if group is not None:
        result = intervene(lm, tset, graph, group.members, label=group.label, prepared=prepared)
        out["supernode"] = {"members": len(group.members), "seconds": result.seconds, "predicted": result.predicted,
                            "actual": result.actual}
    start = time.perf_counter()
    check = ablation_check(lm, tset, graph, n=20, prepared=prepared)
    out["ablation_check"] = {"seconds": time.perf_counter() - start, "r": check.r, "r_pruned": check.r_pruned,
                             "r_linear": check.r_linear, "r_control": check.r_control, "summary": check.summary()}
    every = group_by_decoder(graph.nodes, tset, args.threshold, singletons=True)
    by_supernode = ablation_check(lm, tset, graph, n=20, groups=every, prepared=prepared, readouts=readouts)
    strongest = [row for row in by_supernode.rows if row["set"] == "strongest"]
    out["ablation_check_supernodes"] = {
        "threshold": args.threshold, "supernodes": len(every), "members_of_the_20": [len(r["nodes"]) for r in
                                                                                      strongest],
        "r": by_supernode.r, "r_pruned": by_supernode.r_pruned, "r_control": by_supernode.r_control,
        "r_linear": by_supernode.r_linear, "diagnostic_r_readouts": by_supernode.r_readouts,
        "summary": by_supernode.summary()}
    if readouts:
        diagnosed = ablation_check(lm, tset, graph, n=20, prepared=prepared, readouts=readouts)
        out["diagnostics_singles"] = {
            "r": diagnosed.r, "r_readouts": diagnosed.r_readouts, "r_readouts_control": diagnosed.r_readouts_control,
            "r_linear": diagnosed.r_linear,
            "decomposition": [{"node": row["nodes"][0], "predicted": round(row["predicted"], 4),
                               "predicted_linear": round(row["predicted_linear"], 4),
                               "actual": round(row["actual"], 4),
                               **{name: round(value, 4) for name, value in row["readouts"].items()}}
                              for row in diagnosed.rows if row["set"] == "strongest"]}
    logit = next(n for n in graph.nodes if n["kind"] == "logit")
    edge = next(e for e in graph.edges if e["target"] == logit["id"] and e["source"].startswith("F"))
    out["edge_heads_seconds"], split = timed(lambda: edge_heads(prepared.run, tset, graph, edge["source"],
                                                                edge["target"]))
    out["edge_heads_summary"] = split.summary()
    n_layers = lm.adapter.n_layers
    out["interaction_seconds"] = {
        "figure": timed(lambda: graph_figure(graph.nodes, graph.edges, graph.tokens, n_layers, "graph"))[0],
        "group_by_decoder": timed(lambda: group_by_decoder(graph.nodes, tset, 0.5))[0],
        "merged_figure": timed(lambda: graph_figure(merge_groups(graph.nodes, groups), group_edges(graph.edges, groups),
                                                    graph.tokens, n_layers, "graph"))[0],
    }
    out["load_average_before"] = before
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
