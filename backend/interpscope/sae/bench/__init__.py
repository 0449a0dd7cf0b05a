"""SAEBench-style metrics of an SAE, each beside its control: first-letter feature absorption, sparse probing on
the Austen-novel tasks, and explanation scores by detection and fuzzing with the bundled LM as the simulator.

    result = interpscope.sae.bench.bench_sae(lm, "assets/saes/smollm2-135m-blocks.15-gated-4608")
    result.to_dict()        # schema interpscope.sae_bench v1, the document `interpscope sae bench --json` writes

One module per metric (absorption, probing, detection, fuzzing) in a registry (registry.py); shared probes, the
random control SAE and the activation cache in common.py; the simulator (judge) in simulator.py.
"""
from __future__ import annotations

from interpscope.sae.bench.registry import BenchMetric, metrics, parse_metrics
from interpscope.sae.bench.result import Measure, MetricResult, SAEBenchResult
from interpscope.sae.bench.run import bench_sae, from_dict, shipped_bench

__all__ = ["BenchMetric", "Measure", "MetricResult", "SAEBenchResult", "bench_sae", "from_dict", "metrics",
           "parse_metrics", "shipped_bench"]
