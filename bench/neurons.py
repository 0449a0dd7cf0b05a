"""Entropy-neuron benchmark and findings on a model (default: the bundled SmolLM2-135M); prints JSON.

Measures: weight analysis time (cold = first call after load, warm = later calls), mean-ablation time per
10k tokens, and what the model shows: top candidates by rho and by null-space norm (rho * ||w_out||), their
total vs direct effects and norm-mediated share against random neurons, and the induction case study.

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python bench/neurons.py [--model M] [--tokens 2048] [--top 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from interpscope.entropy_neurons.ablation import ablate  # noqa: E402
from interpscope.entropy_neurons.induction import induction_study  # noqa: E402
from interpscope.entropy_neurons.ranking import candidates  # noqa: E402
from interpscope.entropy_neurons.store import activation_stores  # noqa: E402
from interpscope.entropy_neurons.unigram import token_counts  # noqa: E402
from interpscope.models import load_model  # noqa: E402


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def _cpu_timed(fn, *args, **kwargs):
    """(value, wall seconds, process CPU seconds): CPU time is the fairer figure on a shared machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - wall, time.process_time() - cpu


def timing_only(lm, layer: int, n_tokens: int, store_tokens: int) -> dict:
    """Ablation cost split into the clean pass and the per-neuron work (final-layer fast path and an earlier
    layer, which needs a forward pass per neuron), from runs with 1 and 3 neurons."""
    from interpscope import corpus
    from interpscope.entropy_neurons.ablation import Neuron, token_effects
    from interpscope.entropy_neurons.unigram import token_counts as counts_of

    tokens = corpus.token_chunks(lm.tokenizer, 128, n_tokens, split="valid")
    middle = lm.adapter.n_layers // 2
    means = {layer: activation_stores(lm, [layer], n_tokens=store_tokens)[layer].mean}
    counts = counts_of(lm.tokenizer, lm.adapter.vocab_size)
    runs = {}
    for label, neurons in (("final_1", [Neuron(layer, 0)]), ("final_3", [Neuron(layer, i) for i in range(3)])):
        _, wall, cpu = _cpu_timed(token_effects, lm, neurons, tokens, means, counts)
        runs[label] = (wall, cpu)
    means[middle] = activation_stores(lm, [middle], n_tokens=store_tokens)[middle].mean
    _, wall, cpu = _cpu_timed(token_effects, lm, [Neuron(middle, 0)], tokens, means, counts)
    scale = 10_000 / tokens[:, 1:].numel()
    per_final = [(runs["final_3"][i] - runs["final_1"][i]) / 2 for i in range(2)]
    clean = [runs["final_1"][i] - per_final[i] for i in range(2)]
    return {"tokens": int(tokens[:, 1:].numel()),
            "clean_pass_per_10k_s": {"wall": round(clean[0] * scale, 1), "cpu": round(clean[1] * scale, 1)},
            "per_final_layer_neuron_per_10k_s": {"wall": round(per_final[0] * scale, 1),
                                                 "cpu": round(per_final[1] * scale, 1)},
            f"one_layer{middle}_neuron_incl_clean_per_10k_s": {"wall": round(wall * scale, 1),
                                                               "cpu": round(cpu * scale, 1)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=2048, help="held-out tokens for the ablation")
    parser.add_argument("--mean-tokens", type=int, default=8192, help="corpus tokens for mean activations")
    parser.add_argument("--top", type=int, default=3, help="candidates by rho and by null-space norm")
    parser.add_argument("--random", type=int, default=8)
    parser.add_argument("--induction-seqs", type=int, default=8)
    parser.add_argument("--half-len", type=int, default=50)
    parser.add_argument("--timing-only", action="store_true", help="only the weight and ablation timings")
    args = parser.parse_args()

    lm, load_s = _timed(load_model, args.model)
    token_counts(lm.tokenizer, lm.adapter.vocab_size)  # the on-disk count cache is not part of the weight timing
    stats, cold_s = _timed(candidates, lm)
    warm = [_timed(candidates, lm)[1] for _ in range(3)]
    if args.timing_only:
        import os

        print(json.dumps({"model": lm.name, "device": str(lm.device),
                          "torch_threads": __import__("torch").get_num_threads(),
                          "load_average": os.getloadavg(), "weight_analysis_cold_s": round(cold_s, 3),
                          "weight_analysis_warm_s": round(min(warm), 3),
                          "ablation": timing_only(lm, stats.layer, args.tokens, args.mean_tokens)}, indent=1))
        return
    null_norm = stats.rho * stats.norm
    by_rho = [int(i) for i in stats.ranking()[: args.top]]
    by_null_norm = [int(i) for i in np.argsort(-null_norm)[: args.top]]
    chosen = list(dict.fromkeys(by_rho + by_null_norm))
    layer = stats.layer

    def describe(i: int) -> dict:
        return {"neuron": f"{layer}.{i}", "rho": round(float(stats.rho[i]), 4), "norm": round(float(stats.norm[i]), 3),
                "norm_percentile": round(float((stats.norm < stats.norm[i]).mean() * 100), 1),
                "logit_var": float(stats.logit_var[i]), "unigram_cosine": round(float(stats.unigram_cosine[i]), 4)}

    stores, store_s = _timed(activation_stores, lm, [layer], n_tokens=args.mean_tokens)
    result, ablate_s = _timed(ablate, lm, [f"{layer}.{i}" for i in chosen], n_tokens=args.tokens,
                              n_random=args.random, mean_tokens=args.mean_tokens)
    n_neurons = len(result.effects)
    effects = [{key: (round(value, 6) if isinstance(value, float) else value)
                for key, value in vars(e).items()} for e in result.effects]
    randoms = result.random()

    def median(key: str, rows) -> float:
        return float(statistics.median(getattr(r, key) for r in rows))

    study, induction_s = _timed(induction_study, lm, [f"{layer}.{i}" for i in chosen], n_sequences=args.induction_seqs,
                                half_len=args.half_len, n_random=args.random, means={layer: stores[layer].mean})
    report = {
        "model": lm.name, "device": str(lm.device), "layer": layer, "k": stats.k, "load_s": round(load_s, 2),
        "weight_analysis_cold_s": round(cold_s, 3), "weight_analysis_warm_s": round(min(warm), 3),
        "weight_analysis_warm_runs_s": [round(w, 3) for w in warm],
        "norm_median": round(float(np.median(stats.norm)), 3), "rho_median": round(float(np.median(stats.rho)), 4),
        "top_by_rho": [describe(i) for i in by_rho], "top_by_null_norm": [describe(i) for i in by_null_norm],
        "mean_store_s": round(store_s, 1), "mean_store_tokens": args.mean_tokens,
        "ablation": {"n_tokens": result.n_tokens, "n_neurons": n_neurons, "seconds": round(ablate_s, 1),
                     "seconds_per_10k_tokens": round(ablate_s * 10_000 / result.n_tokens, 1),
                     "seconds_per_10k_tokens_per_neuron": round(ablate_s * 10_000 / result.n_tokens / n_neurons, 1),
                     "clean_loss": round(result.clean_loss, 4), "clean_entropy": round(result.clean_entropy, 4),
                     "random_median_loss_total_abs": median("loss_total_abs", randoms),
                     "random_median_loss_direct_abs": median("loss_direct_abs", randoms),
                     "effects": effects},
        "induction": {"seconds": round(induction_s, 1), "neurons": study.neurons, "is_random": study.is_random,
                      "first_half_activation": [round(float(v), 4) for v in study.first_half_activation],
                      "second_half_activation": [round(float(v), 4) for v in study.second_half_activation],
                      "standardised_change": [round(float(v), 3) for v in study.standardised_change],
                      "entropy_first_half": round(float(np.nanmean(study.entropy[: args.half_len])), 3),
                      "entropy_second_half": round(float(np.nanmean(study.entropy[args.half_len:])), 3),
                      "loss_first_half": round(float(np.nanmean(study.loss[: args.half_len])), 3),
                      "loss_second_half": round(float(np.nanmean(study.loss[args.half_len:])), 3),
                      "ablation_entropy_change_halves": study.ablation_entropy_change,
                      "ablation_entropy_change_direct_halves": study.ablation_entropy_change_direct,
                      "ablation_loss_change_halves": study.ablation_loss_change},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
