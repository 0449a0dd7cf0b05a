"""In-process timings of every backend call behind the interactive-speed budgets, on the bundled model; prints JSON.

Each row: the page action, the backend call, p50 / p95 wall seconds (and p50 process CPU seconds) over several
runs after a warm-up, the budget, and the load average when it ran. The machine is shared: read the figures beside
their load average (the budgets are for a quiet 2-core CPU). `timing_rows()` returns the rows for other benchmarks
(bench/interactive.py drives the browser on top of them).

    nice -n 10 .venv/bin/python bench/backend_timings.py [--quick] [--repeats 5] [--only relevance,steer]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

SAE = ROOT / "assets" / "saes" / "smollm2-135m-blocks.15-gated-4608"
PROMPT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


def _measure(fn: Callable[[], object], runs: int, warmup: int = 1, before: Callable[[], None] | None = None) -> dict:
    for _ in range(warmup):
        if before:
            before()
        fn()
    walls, cpus = [], []
    for _ in range(runs):
        if before:
            before()
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"seconds_p50": float(np.percentile(walls, 50)), "seconds_p95": float(np.percentile(walls, 95)),
            "seconds_min": float(min(walls)), "cpu_seconds_p50": float(np.percentile(cpus, 50)), "runs": runs,
            "loadavg": [round(v, 2) for v in os.getloadavg()]}


def _row(action: str, call: str, budget: float, figures: dict, kind: str = "seconds", **extra) -> dict:
    value = figures["seconds_p50"] if kind == "seconds" else figures[kind]
    within = value <= budget if kind != "tokens_per_second" else value >= budget
    budget_kind = "max " + kind if kind != "tokens_per_second" else "min tokens/s"
    return {"action": action, "call": call, "budget": budget, "budget_kind": budget_kind,
            "within_budget": bool(within), **figures, **extra}


def _text(lm, n_tokens: int) -> str:
    from interpscope.corpus import token_chunks

    return lm.tokenizer.decode(token_chunks(lm.tokenizer, n_tokens, n_tokens, split="test")[0].tolist())


def relevance_rows(lm, repeats: int) -> list[dict]:
    from interpscope.predict import forget_next_logits, predict_next
    from interpscope.relevance.api import explain, make_target, run_method
    from interpscope.relevance.engine import gradient_only

    rows = [_row("Home prediction", "predict_next (uncached)", 0.5,
                 _measure(lambda: predict_next(lm, "The capital of France is", fresh=True), repeats * 2))]
    for length, budget in ((64, 1.5), (512, 5.0)):
        text = _text(lm, length)
        runs = repeats if length == 64 else max(2, repeats // 2)
        for method in ("attnlrp", "cplrp", "gradxinput"):
            figures = _measure(lambda text=text, method=method: (predict_next(lm, text, top=10),
                                                                 explain(lm, text, method)), runs,
                               before=forget_next_logits)
            rows.append(_row(f"Relevance map ({length} tokens)", f"predict_next + explain({method}), cold", budget,
                             figures, tokens=length))
        figures = _measure(lambda text=text: explain(lm, text, "attnlrp"), runs, before=forget_next_logits)
        rows.append(_row(f"Relevance map ({length} tokens)", "explain(attnlrp) alone, its top-10 for the page", budget,
                         figures, tokens=length))
        ids = lm.encode(text)
        target = make_target(lm, ids)
        grad, lrp = [], []
        run_method(lm, ids, "attnlrp", target)
        gradient_only(lm.adapter, ids, target)
        for _ in range(runs + 1):  # interleaved, so both see the same load
            grad.append(_measure(lambda ids=ids, target=target: gradient_only(lm.adapter, ids, target), 1, warmup=0))
            lrp.append(_measure(lambda ids=ids, target=target: run_method(lm, ids, "attnlrp", target), 1, warmup=0))
        ratio_wall = min(r["seconds_min"] for r in lrp) / min(g["seconds_min"] for g in grad)
        ratio_cpu = min(r["cpu_seconds_p50"] for r in lrp) / min(g["cpu_seconds_p50"] for g in grad)
        rows.append({"action": f"AttnLRP vs gradient ({length} tokens)", "call": "run_method(attnlrp) / gradient_only",
                     "budget": 1.05, "budget_kind": "max ratio", "ratio_wall_best": ratio_wall,
                     "ratio_cpu_best": ratio_cpu, "within_budget": bool(min(ratio_wall, ratio_cpu) <= 1.05),
                     "gradient_seconds_min": min(g["seconds_min"] for g in grad),
                     "attnlrp_seconds_min": min(r["seconds_min"] for r in lrp), "runs": runs + 1,
                     "loadavg": [round(v, 2) for v in os.getloadavg()]})
    from interpscope.progress import with_eta

    etas: list[float | None] = []
    figures = _measure(lambda: explain(lm, _text(lm, 64), "ig", progress=with_eta(lambda d, t, s: etas.append(s))),
                       1, warmup=0)
    rows.append(_row("Integrated Gradients, 32 steps (64 tokens)", "explain(ig, progress=...)", 15.0, figures,
                     progress_calls=len(etas)))
    return rows


def sae_rows(lm, repeats: int, eval_tokens: int) -> list[dict]:
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae
    from interpscope.sae.store.prompt import feature_attribution, prompt_features
    from interpscope.sae.store.steering import steer

    sae = load_sae(SAE)
    text = _text(lm, 64)
    feature = prompt_features(lm, sae, text).top_features[0]
    rows = [_row("Feature attribution, LRP (64 tokens)", "feature_attribution(attnlrp)", 2.0,
                 _measure(lambda: feature_attribution(lm, sae, text, feature, -1, "attnlrp"), repeats))]
    rows.append(_row("Steering, two 32-token continuations", "steer(add, n_new=32)", 3.0,
                     _measure(lambda: steer(lm, sae, PROMPT, feature, "add", 10.0, 32), max(2, repeats // 2))))
    rows.append(_row("Ablation, two 32-token continuations", "steer(ablate, n_new=32)", 3.0,
                     _measure(lambda: steer(lm, sae, PROMPT, feature, "ablate", 0.0, 32), max(2, repeats // 2))))
    result = {}
    figures = _measure(lambda: result.setdefault("r", evaluate_sae(lm, sae, n_tokens=eval_tokens)), 1, warmup=0)
    figures["tokens_per_second"] = result["r"].n_tokens / figures["seconds_p50"]
    rows.append(_row("SAE evaluation", f"evaluate_sae({eval_tokens} tokens)", 500.0, figures, kind="tokens_per_second",
                     tokens=result["r"].n_tokens))
    return rows


def neuron_rows(lm, repeats: int) -> list[dict]:
    from interpscope.entropy_neurons import page_store
    from interpscope.entropy_neurons.ablation import ablate
    from interpscope.entropy_neurons.page import neuron_card, neuron_page

    def cold() -> None:
        page_store._load_layer.cache_clear()

    rows = [_row("Entropy-neuron page open", "neuron_page (store, cold)", 2.0,
                 _measure(lambda: neuron_page(lm), repeats, before=cold))]
    rows.append(_row("Neuron detail", "neuron_card(29.830) (store)", 1.0,
                     _measure(lambda: neuron_card(lm, 29, 830), repeats)))
    rows.append(_row("One neuron's causal ablation (2,048 tokens)", "ablate(29.830, n_random=0)", 10.0,
                     _measure(lambda: ablate(lm, ["29.830"], n_tokens=2048, n_random=0), 1, warmup=0)))
    return rows


def fourier_rows(lm, repeats: int) -> list[dict]:
    from interpscope.fourier import precomputed
    from interpscope.fourier.addition import run_addition, small_sum_pairs
    from interpscope.fourier.filters import filter_table
    from interpscope.fourier.probe import DIGIT_PROBE_PROMPTS, default_numbers, prompt_pairs, single_token_setup
    from interpscope.fourier.spectra import embedding_spectrum, hidden_spectra
    from interpscope.models import load_model

    def first_open_smollm2() -> None:
        hidden_spectra(lm, default_numbers(lm))
        run_addition(lm, small_sum_pairs(DIGIT_PROBE_PROMPTS))

    rows = [_row("Fourier page first open (smollm2-135m)", "hidden_spectra + run_addition (store, cold)", 3.0,
                 _measure(first_open_smollm2, repeats, before=precomputed.forget))]
    adder = load_model("adder")
    rows.append(_row("Fourier page first open (adder)", "embedding_spectrum x2 (cold)", 3.0,
                     _measure(lambda: [embedding_spectrum(adder, 100, m) for m in ("embedding", "unembedding")],
                              repeats, before=precomputed.forget)))
    numbers = single_token_setup(adder, 100)
    asked = prompt_pairs(numbers.n_numbers, 500, split="all")
    rows.append(_row("Fourier filter table (500 prompts, adder)", "filter_table", 10.0,
                     _measure(lambda: filter_table(adder, numbers, asked), max(2, repeats // 2)),
                     prompts=len(asked.pairs)))
    return rows


GROUPS = {"relevance": relevance_rows, "sae": sae_rows, "neurons": neuron_rows, "fourier": fourier_rows}


def timing_rows(lm=None, repeats: int = 5, only: list[str] | None = None, eval_tokens: int = 2048) -> list[dict]:
    """The timing rows (one dict per action, with its budget), on `lm` (default: the bundled model, CPU)."""
    from interpscope.models import load_model

    lm = lm or load_model("smollm2-135m", device="cpu", dtype="float32")
    rows: list[dict] = []
    for name, group in GROUPS.items():
        if only and name not in only:
            continue
        rows += group(lm, repeats, eval_tokens) if name == "sae" else group(lm, repeats)
        print(json.dumps({"done": name, "rows": len(rows), "loadavg": os.getloadavg()}), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs per timing after a warm-up (default 5)")
    parser.add_argument("--only", default=None, help="comma-separated groups: " + ",".join(GROUPS))
    parser.add_argument("--eval-tokens", type=int, default=2048, help="tokens for the SAE evaluation row")
    parser.add_argument("--quick", action="store_true", help="2 runs per timing, 512 evaluation tokens")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's choice; 1 is steadier on a machine shared with others)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats, eval_tokens = (2, 512) if args.quick else (args.repeats, args.eval_tokens)
    started, load_before = time.perf_counter(), os.getloadavg()
    from interpscope.models import load_model

    lm = load_model("smollm2-135m", device="cpu", dtype="float32")
    rows = timing_rows(lm, repeats, args.only.split(",") if args.only else None, eval_tokens)
    print(json.dumps({"model": "smollm2-135m", "device": "cpu", "torch_threads": torch.get_num_threads(),
                      "cpu_count": os.cpu_count(), "loadavg_start": load_before, "loadavg_end": os.getloadavg(),
                      "note": "shared machine: read each figure beside its load average; budgets assume a quiet "
                              "2-core CPU", "seconds_total": round(time.perf_counter() - started, 1),
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
