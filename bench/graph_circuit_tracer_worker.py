"""circuit-tracer's side of bench/graph_circuit_tracer.py: run in circuit-tracer's own venv (it imports no Interpscope).

    /work/ct-venv/bin/python bench/graph_circuit_tracer_worker.py MODEL_FOLDER TRANSCODER_FOLDER IDS_JSON OUT.npz \
        [--max-feature-nodes N]

Reads the token ids (Interpscope's, BOS first) from IDS_JSON, builds circuit-tracer's graph with its nnsight backend
(float32, CPU, max_n_logits 10, desired_logit_prob 0.95, batch_size 512), prunes it with prune_graph's defaults,
scores it with compute_graph_scores, and writes the square adjacency with each node's label, the node influence, the
pruned masks, the demeaned logits, the wall and CPU seconds of attribute() and the process's peak resident memory
(VmHWM).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("transcoders")
    parser.add_argument("ids")
    parser.add_argument("out")
    parser.add_argument("--max-feature-nodes", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from circuit_tracer.attribution.attribute import attribute
    from circuit_tracer.graph import compute_graph_scores, compute_node_influence, prune_graph
    from circuit_tracer.replacement_model.replacement_model_nnsight import NNSightReplacementModel
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set

    folder = Path(args.transcoders)
    n_layers = len(list(folder.glob("layer_*.safetensors")))
    paths = {layer: str(folder / f"layer_{layer}.safetensors") for layer in range(n_layers)}
    device = torch.device("cpu")
    transcoders = load_transcoder_set(paths, scan="interpscope-smollm2-135m", feature_input_hook="mlp.hook_in",
                                      feature_output_hook="hook_mlp_out", device=device, dtype=torch.float32,
                                      lazy_encoder=False, lazy_decoder=False)
    model = NNSightReplacementModel.from_pretrained_and_transcoders(args.model, transcoders, device=device,
                                                                     dtype=torch.float32)
    ids = torch.tensor(json.loads(Path(args.ids).read_text()), dtype=torch.long)
    with torch.no_grad():
        logits = model._model(ids[None]).logits[0, -1].double()  # the wrapped transformers model's own pass

    start, cpu = time.perf_counter(), time.process_time()
    graph = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95, batch_size=512,
                      max_feature_nodes=args.max_feature_nodes)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    pruned = prune_graph(graph)
    replacement, completeness = compute_graph_scores(graph)

    n_pos = len(ids)
    n_layers = graph.cfg.n_layers
    selected = graph.active_features[graph.selected_features]
    labels = [f"F{int(layer)}_{int(feature)}_{int(pos)}" for layer, pos, feature in selected.tolist()]
    labels += [f"R{layer}_{pos}" for layer in range(n_layers) for pos in range(n_pos)]
    labels += [f"E_{pos}" for pos in range(n_pos)]
    token_ids = [t.vocab_idx for t in graph.logit_targets]
    labels += [f"L_{t}" for t in token_ids]
    weights = torch.zeros(graph.adjacency_matrix.shape[0])
    weights[-len(token_ids):] = graph.logit_probabilities
    influence = compute_node_influence(graph.adjacency_matrix, weights)
    demeaned = (logits - logits.mean()).numpy()
    np.savez(args.out, adjacency=graph.adjacency_matrix.numpy(), labels=np.array(labels), influence=influence.numpy(),
             node_mask=pruned.node_mask.numpy(), edge_mask=pruned.edge_mask.numpy(),
             logit_ids=np.array(token_ids), probabilities=graph.logit_probabilities.numpy(),
             demeaned_logits=demeaned[token_ids], scores=np.array([replacement, completeness]),
             seconds=np.array(seconds), cpu_seconds=np.array(cpu_seconds), vm_hwm_mib=np.array(vm_hwm_mib()),
             n_active=np.array(int(graph.active_features.shape[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
