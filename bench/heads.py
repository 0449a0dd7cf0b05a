"""Benchmark of the attention-heads view and the tuned lens on the bundled model; prints one JSON object.

- head finder over every head (8 sequences of 2 x 40 random tokens; budget <= 5 s), and with the top 5 induction
  heads ablated against 5 random draws (the measured repetition accuracies are printed too);
- every head's pattern on 512 tokens: computed, and one head's figure drawn (built and serialised as the page sends
  it; budget <= 1 s to draw);
- the tuned lens: the flow page's lens comparison on a 32-token text, and one translator step on 512 residuals.

Run: OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python bench/heads.py [--model smollm2-135m] [--repeats 3]
     [--skip ablation,lens]
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

import torch  # noqa: E402

from interpscope.corpus import token_chunks  # noqa: E402
from interpscope.flow.tuned import available  # noqa: E402
from interpscope.heads.finder import find_heads  # noqa: E402
from interpscope.heads.patterns import head_patterns  # noqa: E402
from interpscope.models import load_model  # noqa: E402


def best_of(repeats: int, fn):
    """(best seconds, last value) over `repeats` runs."""
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: ablation, lens")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    lm = load_model(args.model, device="cpu")
    out: dict = {"model": lm.name, "load_average": os.getloadavg(), "threads": torch.get_num_threads()}
    seconds, found = best_of(args.repeats, lambda: find_heads(lm))
    out["head_finder_seconds"] = {"value": seconds, "budget": 5.0, "heads": lm.adapter.n_layers * lm.adapter.n_heads}
    out["top_induction"] = found.top("induction", 5)
    if "ablation" not in skip:
        seconds, scores = best_of(1, lambda: find_heads(lm, ablate=5))
        out["head_finder_with_ablation_seconds"] = seconds
        out["induction_chance"] = scores.chance["induction"]
        a = scores.ablation or {}
        out["ablation"] = {k: a.get(k) for k in ("mode", "k", "heads", "clean_accuracy", "ablated_accuracy",
                                                 "random_accuracy_mean", "random_accuracy_min", "clean_loss",
                                                 "ablated_loss")}
        out["ablation"]["random_accuracies"] = [r["accuracy"] for r in a.get("random", [])]
    ids = token_chunks(lm.tokenizer, 512, 512, split="test")[0]
    text = lm.tokenizer.decode(ids.tolist())
    seconds, patterns = best_of(args.repeats, lambda: head_patterns(lm, text, prepend_bos=False))
    out["patterns_512_seconds"] = {"value": seconds, "tokens": len(patterns.tokens)}

    def draw():
        return patterns.with_heads(["3.1"]).figure().to_json()

    seconds, drawn = best_of(args.repeats, draw)
    out["pattern_draw_512_seconds"] = {"value": seconds, "budget": 1.0, "json_bytes": len(drawn)}
    if available(lm.name) and "lens" not in skip:
        from interpscope.flow.compare import compare_lenses
        from interpscope.flow.tuned import load_tuned_lens

        lens = load_tuned_lens(lm)
        short = token_chunks(lm.tokenizer, 32, 32, split="test")[:1]
        seconds, comparison = best_of(args.repeats, lambda: compare_lenses(lm, short, []))
        out["lens_comparison_32_seconds"] = seconds
        out["lens_kl_32_tokens"] = {"logit": [round(float(v), 3) for v in comparison.kl_logit],
                                    "tuned": [round(float(v), 3) for v in comparison.kl_tuned]}
        residual = torch.randn(512, lm.adapter.d_model)
        seconds, _ = best_of(args.repeats, lambda: lens.logits(lm.adapter, lm.adapter.n_layers // 2, residual))
        out["tuned_lens_step_512_seconds"] = seconds
        out["tuned_lens_heldout_kl"] = lens.heldout_kl
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
