"""Interpscope's circuit-tracer-compatible graphs against circuit-tracer 0.5.0 itself (issue 43, item 1).

circuit-tracer runs in its own venv (never in the test suite; see docs/benchmarks/graphs.md for how to make it):

    python3.11 -m venv /work/ct-venv
    /work/ct-venv/bin/pip install torch==2.13.0          # first: the CPU wheel
    /work/ct-venv/bin/pip install circuit-tracer==0.5.0 nnsight==0.7.0

Both tools get the same model folder (the bundled SmolLM2-135M's converted folder, which transformers 4.57 reads
right since its config carries `rope_theta`), the same transcoders (the shipped set, converted to circuit-tracer's
per-layer safetensors: W_enc [d_sae, d_model], W_dec, b_enc, b_dec, float32) and the same token ids (Interpscope's,
BOS first). Per prompt and budget (128 features, and every active feature) the two run interleaved, each in a fresh
process with one thread (bench/graph_circuit_tracer_worker.py in circuit-tracer's venv, this file's --worker in
Interpscope's), and the reference JSON gets: Pearson r of the square adjacency over all node pairs after mapping node
ids (and the largest difference), the nodes only one side has, the top-50 overlap of feature and error nodes by
influence, both tools' replacement and completeness scores, the logit reproduction (each side's unpruned logit row
sum and the demeaned logit; Interpscope's left-out b_dec and BOS parts), the kept nodes and edges after pruning,
the wall and CPU seconds of the graph alone (circuit-tracer's attribute(); Interpscope's build_graph; on a shared
machine the CPU seconds are the fairer figure) and each process's peak
resident memory (VmHWM, model load included), with the load average.

Run: nice -n 10 .venv/bin/python bench/graph_circuit_tracer.py [--ct-python /work/ct-venv/bin/python]
     [--prompts 5] [--full-prompts 2] [--out bench/reference/graph-circuit-tracer-cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "backend"))

import numpy as np  # noqa: E402

SET = ROOT / "assets" / "transcoders" / "smollm2-135m"
PROMPTS = ROOT / "assets" / "prompts" / "heldout-v1.jsonl"
ALL = 1_000_000  # a feature budget above any prompt's active features: every feature is expanded


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def convert_transcoders(out: Path) -> Path:
    """The shipped SAELens-format set as circuit-tracer's per-layer files (layer_{i}.safetensors)."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    for folder in sorted(SET.glob("layer_*")):
        layer = int(folder.name.split("_")[1])
        target = out / f"layer_{layer}.safetensors"
        if target.is_file():
            continue
        tensors = load_file(str(folder / "sae_weights.safetensors"))
        save_file({"W_enc": tensors["W_enc"].T.float().contiguous(), "W_dec": tensors["W_dec"].float().contiguous(),
                   "b_enc": tensors["b_enc"].float(), "b_dec": tensors["b_dec"].float()}, str(target))
    return out


def worker(ids_path: Path, out: Path, max_feature_nodes: int) -> None:
    """Interpscope's side: the circuit-tracer-convention graph of the ids, its square adjacency and node labels."""
    import torch

    torch.set_num_threads(1)
    from interpscope.graphs import convention
    from interpscope.graphs.build import build_graph
    from interpscope.models.loading import load_model
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm = load_model("smollm2-135m", device="cpu")
    tset = load_transcoder_set(SET)
    ids = json.loads(ids_path.read_text())
    text = lm.tokenizer.decode(ids[1:])
    captured = {}
    original = convention.assemble

    def capture(lm_, rep, adj, *args, **kwargs):
        captured.update(rep=rep, adj=adj)
        return original(lm_, rep, adj, *args, **kwargs)

    convention.assemble = capture
    start, cpu = time.perf_counter(), time.process_time()
    graph = build_graph(lm, tset, text, convention="circuit-tracer", max_feature_nodes=max_feature_nodes, lrp=None)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    if graph.token_ids != ids:
        raise SystemExit(f"Interpscope tokenised the text as {graph.token_ids}, not {ids}")
    rep, adj = captured["rep"], captured["adj"]
    A, row_node = adj.matrix()
    M, columns = convention.square(A, row_node, rep.n_features, rep.n_columns)
    feats = rep.features
    T = rep.run.n_tokens
    labels = []
    for column in columns:
        if column < 0:
            continue
        if column < rep.n_features:
            labels.append(f"F{int(feats.layer[column])}_{int(feats.feature[column])}_{int(feats.position[column])}")
        elif column < rep.embedding_column(0):
            layer, position = divmod(int(column) - rep.n_features, T)
            labels.append(f"R{layer}_{position}")
        else:
            labels.append(f"E_{int(column) - rep.embedding_column(0)}")
    labels += [f"L_{entry['id']}" for entry in graph.logits or []]
    k = len(graph.logits or [])
    weights = np.zeros(M.shape[0])
    weights[-k:] = [entry["weight"] for entry in graph.logits or []]
    influence = convention._influence(convention._normalise(M), weights)
    doc = graph.to_dict()
    np.savez(out, adjacency=M, labels=np.array(labels), influence=influence,
             logit_ids=np.array([e["id"] for e in doc["logits"]]),
             probabilities=np.array([e["probability"] for e in doc["logits"]]),
             demeaned_logits=np.array([e["logit"] for e in doc["logits"]]),
             row_sums=np.array([e["logit_inputs_sum"] for e in doc["logits"]]),
             left_out=np.array([[e["left_out"]["b_dec"], e["left_out"]["bos"]] for e in doc["logits"]]),
             scores=np.array([graph.replacement_score, graph.completeness_score]),
             kept=np.array([sum(1 for node in graph.nodes if node["kind"] != "logit"), len(graph.edges)]),
             seconds=np.array(seconds), cpu_seconds=np.array(cpu_seconds), vm_hwm_mib=np.array(vm_hwm_mib()),
             n_active=np.array(rep.n_features))


def compare(ct: dict, ours: dict) -> dict:
    """The figures of one prompt and budget."""
    ct_labels, our_labels = list(ct["labels"]), list(ours["labels"])
    common = [label for label in ct_labels if label in set(our_labels)]
    where_ct = {label: i for i, label in enumerate(ct_labels)}
    where_ours = {label: i for i, label in enumerate(our_labels)}
    i_ct = np.array([where_ct[label] for label in common])
    i_ours = np.array([where_ours[label] for label in common])
    a = ct["adjacency"][np.ix_(i_ct, i_ct)].astype(np.float64).ravel()
    b = ours["adjacency"][np.ix_(i_ours, i_ours)].astype(np.float64).ravel()
    rankable = [label for label in common if label[0] in "FR"]

    def top(influence, where, n=50):
        return {label for label in sorted(rankable, key=lambda label: -influence[where[label]])[:n]}

    ct_n = int(np.asarray(ct["node_mask"]).sum()) - len(ct["logit_ids"])
    ct_edges = int(np.asarray(ct["edge_mask"]).sum())
    k = len(ct["logit_ids"])
    logits_ct = ct["adjacency"][-k:].astype(np.float64).sum(1)
    logits_ours = ours["adjacency"][-k:].astype(np.float64).sum(1)
    return {
        "nodes": len(ct_labels), "nodes_only_circuit_tracer": len(set(ct_labels) - set(our_labels)),
        "nodes_only_interpscope": len(set(our_labels) - set(ct_labels)),
        "active_features": {"circuit_tracer": int(ct["n_active"]), "interpscope": int(ours["n_active"])},
        "adjacency_pearson": float(np.corrcoef(a, b)[0, 1]), "adjacency_max_abs_diff": float(np.abs(a - b).max()),
        "top50_overlap": len(top(ct["influence"], where_ct) & top(ours["influence"], where_ours)),
        "logit_targets_same": [int(t) for t in ct["logit_ids"]] == [int(t) for t in ours["logit_ids"]],
        "probabilities_max_abs_diff": float(np.abs(np.asarray(ct["probabilities"], dtype=np.float64)
                                                   - ours["probabilities"]).max()),
        "scores": {"circuit_tracer": {"replacement": float(ct["scores"][0]), "completeness": float(ct["scores"][1])},
                   "interpscope": {"replacement": float(ours["scores"][0]),
                                   "completeness": float(ours["scores"][1])}},
        "scores_max_abs_diff": float(np.abs(np.asarray(ct["scores"]) - ours["scores"]).max()),
        "logit": {"demeaned_circuit_tracer": float(ct["demeaned_logits"][0]),
                  "demeaned_interpscope": float(ours["demeaned_logits"][0]),
                  "row_sum_circuit_tracer": float(logits_ct[0]), "row_sum_interpscope": float(logits_ours[0]),
                  "row_sum_interpscope_every_active_feature": float(ours["row_sums"][0]),
                  "left_out_b_dec": float(ours["left_out"][0][0]), "left_out_bos": float(ours["left_out"][0][1]),
                  "interpscope_closure": float(ours["demeaned_logits"][0] - ours["row_sums"][0]
                                               - ours["left_out"][0].sum())},
        "pruned": {"circuit_tracer": {"nodes": ct_n, "edges": ct_edges},
                   "interpscope": {"nodes": int(ours["kept"][0]), "edges": int(ours["kept"][1])}},
        "seconds": {"circuit_tracer": float(ct["seconds"]), "interpscope": float(ours["seconds"])},
        "cpu_seconds": {name: float(side["cpu_seconds"]) if "cpu_seconds" in side else None
                        for name, side in (("circuit_tracer", ct), ("interpscope", ours))},
        "vm_hwm_mib": {"circuit_tracer": float(ct["vm_hwm_mib"]), "interpscope": float(ours["vm_hwm_mib"])},
    }


def table(document: dict) -> str:
    """The docs' table of a reference document (docs/benchmarks/graphs.md)."""
    lines = ["| prompt | tokens | features expanded | active | adjacency r (max diff) | top-50 overlap | "
             "replacement ct / ours | completeness ct / ours | demeaned logit: ct sum / ours / b_dec / BOS | "
             "pruned nodes / edges (both) | seconds ct / ours | VmHWM MiB ct / ours |", "|" + "---|" * 12]
    for c in document["cases"]:
        s, lg, pr = c["scores"], c["logit"], c["pruned"]
        same = pr["circuit_tracer"] == pr["interpscope"]
        lines.append(
            f"| {c['id']} | {c['tokens']} | {c['max_feature_nodes']} | {c['active_features']['interpscope']:,} | "
            f"{c['adjacency_pearson']:.6f} ({c['adjacency_max_abs_diff']:.1e}) | {c['top50_overlap']} | "
            f"{s['circuit_tracer']['replacement']:.4f} / {s['interpscope']['replacement']:.4f} | "
            f"{s['circuit_tracer']['completeness']:.4f} / {s['interpscope']['completeness']:.4f} | "
            f"{lg['demeaned_circuit_tracer']:.3f}: {lg['row_sum_circuit_tracer']:.3f} / {lg['row_sum_interpscope']:.3f}"
            f" / {lg['left_out_b_dec']:.3f} / {lg['left_out_bos']:.3f} | "
            f"{pr['interpscope']['nodes']} / {pr['interpscope']['edges']}{'' if same else ' (differ)'} | "
            f"{c['seconds']['circuit_tracer']:.1f} / {c['seconds']['interpscope']:.1f}"
            + (f" (CPU {cpu['circuit_tracer']:.1f} / {cpu['interpscope']:.1f})"
               if None not in (cpu := c["cpu_seconds"]).values() else "") + " | "
            f"{c['vm_hwm_mib']['circuit_tracer']:.0f} / {c['vm_hwm_mib']['interpscope']:.0f} |")
    return "\n".join(lines)


def prompts(n: int) -> list[dict]:
    """The first prompt of each category in turn (the held-out set), shortest first within the first n."""
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    picked, seen = [], set()
    for row in rows:
        if row["category"] not in seen:
            seen.add(row["category"])
            picked.append(row)
    return picked[:n]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, metavar=("IDS", "OUT", "MAX_FEATURES"), help=argparse.SUPPRESS)
    parser.add_argument("--ct-python", default="/work/ct-venv/bin/python")
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--full-prompts", type=int, default=1,
                        help="the shortest prompts also traced with every feature expanded (circuit-tracer takes "
                             "minutes per 512 rows on a CPU)")
    parser.add_argument("--table", action="store_true", help="print the docs' table of --out and stop")
    parser.add_argument("--fresh", action="store_true", help="recompute cases whose outputs are in --work already")
    parser.add_argument("--work", type=Path, default=Path("/tmp/graph-circuit-tracer"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "reference" / "graph-circuit-tracer-cpu.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]), int(args.worker[2]))
        return 0
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    if not Path(args.ct_python).is_file():
        print(f"No circuit-tracer venv at {args.ct_python}: make it as the docstring says.", file=sys.stderr)
        return 2
    from interpscope.models.loading import load_model
    from interpscope.models.smollm2 import convert
    from interpscope.relevance.api import input_ids_for

    model_folder = convert()  # also adds the transformers 4.x keys to a folder converted before them
    lm = load_model("smollm2-135m", device="cpu")
    tc_folder = convert_transcoders(args.work / "transcoders")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cases = []
    chosen = prompts(args.prompts)
    shortest = sorted(chosen, key=lambda row: len(input_ids_for(lm, row["text"])[0].reshape(-1)))
    runs = [(row, 128) for row in chosen] + [(row, ALL) for row in shortest[:args.full_prompts]]
    load_before = os.getloadavg()
    for index, (row, budget) in enumerate(runs):
        ids = [int(i) for i in input_ids_for(lm, row["text"])[0].reshape(-1)]
        tag = f"{row['id']}-{'all' if budget == ALL else budget}"
        ids_path = args.work / f"{tag}.ids.json"
        ids_path.write_text(json.dumps(ids))
        commands = {
            "circuit_tracer": [args.ct_python, str(ROOT / "bench" / "graph_circuit_tracer_worker.py"),
                               str(model_folder), str(tc_folder), str(ids_path), str(args.work / f"{tag}.ct.npz")]
            + ([] if budget == ALL else ["--max-feature-nodes", str(budget)]),
            "interpscope": [sys.executable, __file__, "--worker", str(ids_path), str(args.work / f"{tag}.is.npz"),
                            str(budget)]}
        order = ["circuit_tracer", "interpscope"] if index % 2 == 0 else ["interpscope", "circuit_tracer"]
        for name in order:
            done = args.work / f"{tag}.{'ct' if name == 'circuit_tracer' else 'is'}.npz"
            if done.is_file() and not args.fresh:  # resumable: a case's outputs are kept in --work
                continue
            print(f"{tag}: {name}", file=sys.stderr, flush=True)
            subprocess.run(commands[name], check=True, env=env, cwd=ROOT)
        ct = dict(np.load(args.work / f"{tag}.ct.npz"))
        ours = dict(np.load(args.work / f"{tag}.is.npz"))
        case = {"id": row["id"], "text": row["text"], "tokens": len(ids),
                "max_feature_nodes": "all" if budget == ALL else budget, "order": order, **compare(ct, ours)}
        print(json.dumps(case), file=sys.stderr, flush=True)
        cases.append(case)
    at128 = [c for c in cases if c["max_feature_nodes"] == 128]
    document = {
        "what": "Interpscope convention='circuit-tracer' vs circuit-tracer 0.5.0 (nnsight backend), same model folder, "
                "transcoders and token ids",
        "command": "nice -n 10 .venv/bin/python bench/graph_circuit_tracer.py " + " ".join(argv or sys.argv[1:]),
        "model": "smollm2-135m (bundled, float32)", "transcoders": "assets/transcoders/smollm2-135m",
        "threads": 1, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "summary": {
            "min_adjacency_pearson": min(c["adjacency_pearson"] for c in cases),
            "max_scores_abs_diff": max(c["scores_max_abs_diff"] for c in cases),
            "min_top50_overlap": min(c["top50_overlap"] for c in cases),
            "cpu_time_ratio_interpscope_over_circuit_tracer": {
                budget: float(np.median(ratios)) if (ratios := [
                    c["cpu_seconds"]["interpscope"] / c["cpu_seconds"]["circuit_tracer"] for c in cases
                    if c["max_feature_nodes"] == budget and None not in c["cpu_seconds"].values()]) else None
                for budget in sorted({c["max_feature_nodes"] for c in cases}, key=str)},
            "time_ratio_interpscope_over_circuit_tracer": {
                budget: float(np.median([c["seconds"]["interpscope"] / c["seconds"]["circuit_tracer"]
                                         for c in cases if c["max_feature_nodes"] == budget]))
                for budget in sorted({c["max_feature_nodes"] for c in cases}, key=str)},
            "prompts_at_128": len(at128)},
        "cases": cases}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(document["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
