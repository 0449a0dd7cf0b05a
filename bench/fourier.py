"""Fourier-features benchmark and findings; prints JSON.

Measures, for the bundled adder: test accuracy (plain template and all templates), the embedding spectrum's top
periods and outliers, the module lens (low-frequency share of attention / MLP per layer), the full filter table on
its test split, and the time of the filter table on 500 prompts (target < 60 s on a 2-core CPU). For SmolLM2
(digits split): addition accuracy on 1-2 digit sums (zero-shot and few-shot) and the hidden-state spectra's top
periods per layer.

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python bench/fourier.py [--prompts 500] [--smol-prompts 200]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from interpscope.fourier.addition import run_addition, small_sum_pairs  # noqa: E402
from interpscope.fourier.controls import control_fields  # noqa: E402
from interpscope.fourier.data import TEMPLATES, split_pairs  # noqa: E402
from interpscope.fourier.filters import filter_table, reading  # noqa: E402
from interpscope.fourier.lens import module_lens  # noqa: E402
from interpscope.fourier.probe import probe_pairs, single_token_setup  # noqa: E402
from interpscope.fourier.spectra import describe_regime, embedding_spectrum, hidden_spectra  # noqa: E402
from interpscope.models import load_model  # noqa: E402
from interpscope.results import to_plain  # noqa: E402

FEW_SHOT = "12+7=19\n31+25=56\n4+40=44\n"


def table_rows(table) -> list[dict]:
    return [{"filter": row.kind, "modules": row.modules, "removes": row.removed, "loss": round(row.loss, 4),
             "accuracy": round(row.accuracy, 4), "within_2": round(row.within_2, 4),
             "within_10": round(row.within_10, 4), "rank": row.rank, "zeroes_everything": row.zeroes_everything,
             "errors": row.error_counts, **control_fields(row.control)} for row in table.rows]


def adder_figures(n_prompts: int) -> dict:
    lm = load_model("adder", device="cpu")
    numbers = single_token_setup(lm, None)
    n_numbers = numbers.n_numbers
    test = split_pairs(n_numbers, "test")
    plain = run_addition(lm, test, TEMPLATES[0], numbers=numbers)
    per_template = {t: run_addition(lm, test, t, numbers=numbers).accuracy for t in TEMPLATES}
    spectra = {matrix: embedding_spectrum(lm, n_numbers, matrix=matrix) for matrix in ("embedding", "unembedding")}
    lens = module_lens(lm, numbers, test)
    table = filter_table(lm, numbers, test)
    table_all_tokens = filter_table(lm, numbers, test, positions="all")
    timing_pairs = probe_pairs(n_numbers, n_prompts, split="all", seed=1)
    filter_table(lm, numbers, timing_pairs[:8])  # warm-up
    start = time.perf_counter()
    timed = filter_table(lm, numbers, timing_pairs)
    seconds = time.perf_counter() - start
    return {
        "numbers": n_numbers, "d_model": lm.adapter.d_model, "layers": lm.adapter.n_layers,
        "test_prompts": len(test), "test_accuracy": plain.accuracy, "test_within_2": plain.within_2,
        "test_within_10": plain.within_10, "test_accuracy_per_template": per_template,
        "spectra": {matrix: {"top_periods": [round(float(p), 3) for p in s.periods[np.argsort(-s.magnitude)[:8]]],
                             "outliers": [{"period": round(o.period, 3), "magnitude": round(o.magnitude, 4)}
                                          for o in s.outliers],
                             "regime": describe_regime(s).label,
                             "high_share": round(describe_regime(s).high_share, 4)} for matrix, s in spectra.items()},
        "lens": {"tau": lens.tau, "logit_lens_accuracy": np.round(lens.lens_accuracy, 4),
                 "low_share_attn": np.round(lens.low_share_attn, 4), "low_share_mlp": np.round(lens.low_share_mlp, 4)},
        "filter_table": {"tau": table.tau, "prompts": table.prompts, "positions": table.positions,
                         "control_seeds": table.control_seeds, "rows": table_rows(table), "reading": reading(table),
                         "warnings": table.warnings},
        "filter_table_all_tokens": {"positions": "all", "rows": table_rows(table_all_tokens)},
        "filter_table_timing": {"prompts": timed.prompts, "seconds": round(seconds, 2), "target_seconds": 60},
    }


def smol_figures(n_prompts: int, n_numbers: int) -> dict:
    lm = load_model("smollm2-135m", device="cpu")
    pairs = small_sum_pairs(n_prompts)
    start = time.perf_counter()
    zero = run_addition(lm, pairs, "{a}+{b}=")
    few = run_addition(lm, pairs, "{a}+{b}=", prefix=FEW_SHOT)
    addition_seconds = time.perf_counter() - start
    spectra = hidden_spectra(lm, n_numbers)
    return {
        "prompts": len(pairs), "max_sum": 99, "seconds": round(addition_seconds, 1),
        "zero_shot": {"accuracy": zero.accuracy, "within_2": zero.within_2, "within_10": zero.within_10},
        "few_shot": {"prefix": FEW_SHOT, "accuracy": few.accuracy, "within_2": few.within_2,
                     "within_10": few.within_10},
        "hidden_numbers": n_numbers,
        "hidden_top_periods": {name: [round(p, 3) for p in periods[:5]]
                               for name, periods in zip(spectra.layer_names, spectra.top_periods, strict=True)},
        "last_layer_regime": describe_regime(spectra).label,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=500, help="prompts for the timed filter table")
    parser.add_argument("--smol-prompts", type=int, default=200, help="1-2 digit sums asked of SmolLM2")
    parser.add_argument("--smol-numbers", type=int, default=100, help="N for SmolLM2's hidden-state spectra")
    parser.add_argument("--skip-smol", action="store_true")
    parser.add_argument("--skip-adder", action="store_true")
    args = parser.parse_args()
    result = {} if args.skip_adder else {"adder": adder_figures(args.prompts)}
    if not args.skip_smol:
        result["smollm2"] = smol_figures(args.smol_prompts, args.smol_numbers)
    print(json.dumps(to_plain(result), indent=2))


if __name__ == "__main__":
    main()
