"""Probe for issue 27's ablation criterion: would a linear skip path in the transcoders (a "skip transcoder",
y = W_dec f(x) + W_skip x + b) make the graph's predicted logit changes follow the real model's?

Most of the gap between the graph's prediction and the real forward pass is the real MLPs' response to an edit,
which the graph models through the transcoders alone (interpscope.graphs.freeze's diagnostic readouts). This probe
adds the linear part the shipped transcoders miss, without retraining them: per layer, W_skip (with a bias) is the
ridge least-squares fit of the transcoder's residual y - tc(x) on x over the training windows the transcoders saw
(--tokens, train split, sinks and position 0 left out as in scripts/train_transcoders.py). Reported:
- per layer, held-out FVU (test split, --heldout-tokens) of the transcoder alone and with the skip;
- per prompt, Pearson r of predicted vs actual logit changes over the 20 strongest feature nodes (the shipped
  graph's influence ranking) and over 20 random active features (the control), the graph's prediction (its
  linear replay through the live final norm: GraphRun.predicted) with and without the skip path added to the
  replay (dx += (dx normed by the frozen MLP norm) W_skip at every layer), and r over the strongest that are not
  last-block features.
Nothing here changes the product's graphs; prints one JSON object.

Run: nice -n 10 .venv/bin/python bench/graph_skip_probe.py > out.json   (about 3.5 minutes on 2 cores)
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
sys.path.insert(0, str(ROOT / "scripts"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

PROMPTS = ("The capital of France is", "The Eiffel Tower is in the city of",
           "When Mary and John went to the store, John gave a drink to")


def reconstruction(tc, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return tc.encode(x) @ tc.W_dec + tc.b_dec


def fit_skips(lm, tset, n_tokens: int, ridge: float) -> list[torch.Tensor]:
    """Per layer [d + 1, d]: the least-squares map from [x | 1] to the transcoder's residual y - tc(x)."""
    from train_transcoders import layer_pairs

    from interpscope.corpus import token_chunks

    d, n_layers = lm.adapter.d_model, lm.adapter.n_layers
    xtx = [torch.zeros(d + 1, d + 1, dtype=torch.float64) for _ in range(n_layers)]
    xtr = [torch.zeros(d + 1, d, dtype=torch.float64) for _ in range(n_layers)]
    windows = token_chunks(lm.tokenizer, 128, n_tokens)
    for start in range(0, windows.shape[0], 8):
        for layer, rows in enumerate(layer_pairs(lm, windows[start:start + 8])):
            pair = torch.from_numpy(rows)
            x, y = pair[:, :d], pair[:, d:]
            xa = torch.cat([x, torch.ones(len(x), 1)], 1).double()
            xtx[layer] += xa.T @ xa
            xtr[layer] += xa.T @ (y - reconstruction(tset.transcoders[layer], x)).double()
    skips = []
    for layer in range(n_layers):
        lam = ridge * float(xtx[layer].diagonal()[:d].mean())
        skips.append(torch.linalg.solve(xtx[layer] + lam * torch.eye(d + 1, dtype=torch.float64), xtr[layer]).float())
    return skips


def heldout_fvu(lm, tset, skips: list[torch.Tensor], n_tokens: int) -> list[dict]:
    from train_transcoders import layer_pairs

    from interpscope.corpus import token_chunks

    d = lm.adapter.d_model
    sums = [[0.0, 0.0, 0.0] for _ in skips]
    windows = token_chunks(lm.tokenizer, 128, n_tokens, split="test")
    for start in range(0, windows.shape[0], 8):
        for layer, rows in enumerate(layer_pairs(lm, windows[start:start + 8])):
            pair = torch.from_numpy(rows)
            x, y = pair[:, :d], pair[:, d:]
            alone = reconstruction(tset.transcoders[layer], x)
            skipped = alone + torch.cat([x, torch.ones(len(x), 1)], 1) @ skips[layer]
            sums[layer][0] += float((y - alone).pow(2).sum())
            sums[layer][1] += float((y - skipped).pow(2).sum())
            sums[layer][2] += float((y - y.mean(0)).pow(2).sum())
    return [{"layer": layer, "fvu": a / v, "fvu_with_skip": b / v} for layer, (a, b, v) in enumerate(sums)]


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    return float(np.corrcoef(a, b)[0, 1]) if len(a) > 2 and a.std() > 0 and b.std() > 0 else None


def probe_prompt(lm, tset, skips: list[torch.Tensor], text: str, n: int) -> dict:
    from interpscope.graphs.build import build_graph
    from interpscope.graphs.interventions import GraphRun

    graph = build_graph(lm, tset, text)
    prepared = GraphRun(lm, tset, graph)
    ranked = sorted((node for node in graph.nodes if node.get("kind") == "feature" and not node.get("sink")),
                    key=lambda node: -abs(float(node.get("influence") or 0.0)))[:n]
    control = prepared.random_active(n, {str(node["id"]) for node in ranked}, 0)
    sets = [[node] for node in ranked + control]
    actual = np.array(prepared.actual(sets, 0.0)[0])
    plain = np.array(prepared.predicted(sets, 0.0))
    linear = [skip[:-1] for skip in skips]  # the fitted bias is a constant: it moves no prediction
    skipped = np.array(prepared.through_final_norm(prepared.final_delta(sets, 0.0, skips=linear)))
    k = len(ranked)
    beyond = np.array([int(node["layer"]) != lm.adapter.n_layers - 1 for node in ranked])
    return {"text": text, "strongest": k, "beyond_last_block": int(beyond.sum()),
            "r": pearson(plain[:k], actual[:k]), "r_with_skip": pearson(skipped[:k], actual[:k]),
            "r_beyond_last_block": pearson(plain[:k][beyond], actual[:k][beyond]),
            "r_beyond_last_block_with_skip": pearson(skipped[:k][beyond], actual[:k][beyond]),
            "r_control": pearson(plain[k:], actual[k:]), "r_control_with_skip": pearson(skipped[k:], actual[k:]),
            "rows": [{"node": str(node["id"]), "actual": float(a), "predicted": float(p), "with_skip": float(s)}
                     for node, a, p, s in zip(ranked, actual, plain, skipped, strict=False)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=49152, help="training tokens for the skip fit (the shipped "
                        "transcoders' own)")
    parser.add_argument("--heldout-tokens", type=int, default=8192)
    parser.add_argument("--ridge", type=float, default=1e-3, help="ridge, relative to the mean input variance")
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    import interpscope
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    start, load = time.perf_counter(), os.getloadavg()
    lm = interpscope.load("smollm2-135m", device="cpu")
    folder = default_transcoder_set(lm.name)
    if folder is None:
        print("no shipped transcoder set for smollm2-135m", file=sys.stderr)
        return 2
    tset = load_transcoder_set(folder, lm=lm)
    skips = fit_skips(lm, tset, args.tokens, args.ridge)
    layers = heldout_fvu(lm, tset, skips, args.heldout_tokens)
    prompts = [probe_prompt(lm, tset, skips, text, args.n) for text in PROMPTS]
    print(json.dumps({"command": "bench/graph_skip_probe.py " + " ".join(sys.argv[1:]), "load_start": load,
                      "load_end": os.getloadavg(), "seconds": time.perf_counter() - start,
                      "median_fvu": float(np.median([row["fvu"] for row in layers])),
                      "median_fvu_with_skip": float(np.median([row["fvu_with_skip"] for row in layers])),
                      "layers": layers, "prompts": prompts}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
