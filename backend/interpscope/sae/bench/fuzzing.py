"""Explanation score by fuzzing (EleutherAI's auto-interp, in SAEBench's family of explanation scores): with one
token of a context marked, does the simulator tell a mark on a token where the feature fires from a mark on a token
of the same context where it does not?

Positives: the feature's held-out top contexts with its firing token marked <<like this>>. Negatives: the same
contexts with another token marked, one on which the stored activation is zero (a context without such a token is
left out). Being the same texts, the negatives test whether the explanation picks out the right token, not the
right topic. Scored like detection (AUROC, median-threshold accuracy), beside a random explanation's scores.
"""
from __future__ import annotations

import time

import numpy as np

from interpscope.sae.bench.common import BenchInputs
from interpscope.sae.bench.result import MetricResult
from interpscope.sae.bench.simulator import Query, context, context_span, default_judge, prepared, score_features
from interpscope.sae.store.explain import SHOWN

NAME = "fuzzing"
NEEDS_STORE = True
MEANING = ("Fuzzing: one token of a firing context is marked; the bundled LM judges from the explanation whether "
           "the marked token is what the feature responds to. AUROC (and accuracy) of marks on the firing token vs "
           "on a silent token of the same context, beside another feature's explanation. 0.5 = guessing.")


def fuzzing_examples(inputs: BenchInputs, shared: dict) -> list[tuple[list[Query], list[Query]]]:
    """(correctly marked, mis-marked) queries per sampled feature."""
    store, n = inputs.store, shared["settings"]["n_examples"]
    half = int(store.spec.get("window_top", 10))
    rng = np.random.default_rng(inputs.seed + 1)
    examples = []
    for feature in shared["features"]:
        positives, negatives = [], []
        for rank in range(SHOWN, SHOWN + n):
            seq, pos = (int(v) for v in store.arrays["top_loc"][feature, rank])
            if seq < 0:
                continue
            first, last = context_span(store, seq, pos)
            acts = np.asarray(store.arrays["top_window"][feature, rank], dtype=np.float32)
            silent = [q for q in range(first, last) if q != pos and 0 <= half + q - pos < len(acts)
                      and acts[half + q - pos] <= 0]
            token = store.token_text(int(store.arrays["tokens"][seq, pos]))
            positives.append(Query("", context(store, seq, pos, mark=pos), token))
            if silent:
                q = int(rng.choice(silent))
                negatives.append(Query("", context(store, seq, pos, mark=q),
                                       store.token_text(int(store.arrays["tokens"][seq, q]))))
        examples.append((positives, negatives))
    return examples


def run(inputs: BenchInputs) -> MetricResult:
    """Fuzzing scores of a sample of the SAE's features (needs its feature store)."""
    started = time.perf_counter()
    shared = prepared(inputs)
    examples = fuzzing_examples(inputs, shared)
    judge = default_judge(inputs)
    rows, measures = score_features(judge, shared, examples, inputs.report, "fuzzing")
    return MetricResult(NAME, MEANING, measures,
                        settings={**shared["settings"], "judge": getattr(judge, "name", "judge"),
                                  "features_scored": len(rows)},
                        details=rows, seconds=time.perf_counter() - started)
