"""Explanation score by detection (SAEBench / EleutherAI's auto-interp): from a feature's explanation alone, does the
simulator tell contexts where the feature fires from contexts where it never fires?

Positives: the feature's held-out top contexts (interpscope.sae.bench.simulator). Negatives: windows of the store's
corpus of the same length on which the feature, encoded live through the model and the SAE, never fires (the pool
`interpscope sae explain` scores against, explain.negative_pool), as many as positives. Per feature: AUROC of the
judge's scores (positives against negatives) and the accuracy of thresholding them at their median (balanced set:
0.5 is chance); the mean over the sampled features stands beside the same with a random explanation (another
sampled feature's).
"""
from __future__ import annotations

import time

import numpy as np

from interpscope.sae.bench.common import BenchInputs
from interpscope.sae.bench.result import MetricResult
from interpscope.sae.bench.simulator import Query, context, default_judge, prepared, score_features
from interpscope.sae.store.explain import SHOWN, negative_pool

NAME = "detection"
NEEDS_STORE = True
POOL_WINDOWS = 96  # corpus windows encoded for negatives (a feature is silent on most of them)
MEANING = ("Detection: the bundled LM reads only a feature's explanation and judges whether a text matches it; "
           "AUROC (and accuracy) of its yes/no logit difference on contexts where the feature fires vs never "
           "fires, beside the same judge given another feature's explanation. 0.5 = no better than guessing.")


def detection_examples(inputs: BenchInputs, shared: dict) -> list[tuple[list[Query], list[Query]]]:
    """(positives, negatives) per sampled feature; explanations are filled in by score_features."""
    store, n = inputs.store, shared["settings"]["n_examples"]
    if "pool" not in inputs.memo:
        inputs.memo["pool"] = negative_pool(inputs.lm, inputs.sae, store, n_windows=POOL_WINDOWS)
    texts, peak = inputs.memo["pool"]
    rng = np.random.default_rng(inputs.seed)
    examples = []
    for feature in shared["features"]:
        loc = np.asarray(store.arrays["top_loc"][feature][SHOWN:SHOWN + n])
        positives = [Query("", context(store, int(s), int(p))) for s, p in loc if s >= 0]
        silent = np.flatnonzero(peak[:, feature] <= 0)
        picked = rng.permutation(silent)[:len(positives)]
        examples.append((positives, [Query("", texts[i]) for i in sorted(picked)]))
    return examples


def run(inputs: BenchInputs) -> MetricResult:
    """Detection scores of a sample of the SAE's features (needs its feature store)."""
    started = time.perf_counter()
    shared = prepared(inputs)
    inputs.report(0.0, "detection: negative contexts")
    examples = detection_examples(inputs, shared)
    judge = default_judge(inputs)
    rows, measures = score_features(judge, shared, examples, inputs.report, "detection")
    return MetricResult(NAME, MEANING, measures,
                        settings={**shared["settings"], "judge": getattr(judge, "name", "judge"),
                                  "features_scored": len(rows)},
                        details=rows, seconds=time.perf_counter() - started)
