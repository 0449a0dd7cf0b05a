"""SAE benchmarks on the bundled SmolLM2-135M's residual stream after block 15. Prints JSON (and writes it with --out).

sweep: ReLU and Gated SAEs at several sparsity coefficients each, all trained together from one shuffled buffer
  on the same cached activations and the same number of tokens (matched budget), then evaluated on held-out
  text (Austen test split): L0, FVU, loss recovered (SAE spliced in vs zero-ablation vs clean), KL and shrinkage
  gamma. The L0-vs-loss-recovered and L0-vs-FVU curves are saved as a PNG (--plot).
throughput: activation caching (tokens/s through the model up to the hook), SAE training (tokens/s for the whole
  sweep, and per SAE), evaluation; peak resident memory of the process.

Widths and tokens are far below the paper's; read the comparison as a small-budget replication, not the paper's
setting. The figures in the closing note came from (quiet 2-core CPU, 16 min):
  nice -n 5 .venv/bin/python bench/sae.py --width 2304 --tokens 1048576 --batch-size 4096 --lr 7e-4 \
      --relu-l1 1,2,5 --gated-l1 1,2,5 --eval-tokens 4096 --caching-tokens 8192 \
      --out bench/results/sae.json --plot bench/results/sae_pareto.png

Quick run (defaults, a few minutes):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/sae.py --out bench/results/sae.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from interpscope.models import load_model  # noqa: E402
from interpscope.results import to_plain  # noqa: E402
from interpscope.sae import load_sae  # noqa: E402
from interpscope.sae.activations import build_activation_cache  # noqa: E402
from interpscope.sae.evaluation import evaluate_saes  # noqa: E402
from interpscope.sae.pipeline import SAESpec, train_saes  # noqa: E402

HOOK = "blocks.15.hook_resid_post"


def caching_throughput(lm, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cache = build_activation_cache(lm, HOOK, tokens, folder=Path(tmp) / "c", context_size=128)
        seconds = time.perf_counter() - start
    return {"tokens": cache.n_rows, "seconds": seconds, "tokens_per_s": cache.n_rows / seconds}


def plot(results: list[dict], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from components.export import figure_bytes

    fig = make_subplots(rows=1, cols=2, subplot_titles=("L0 vs loss recovered (higher is better)",
                                                        "L0 vs FVU (lower is better)"))
    colours = {"standard": "#4c78a8", "gated": "#e45756"}
    for arch, label in (("standard", "ReLU"), ("gated", "Gated")):
        rows = sorted((r for r in results if r["architecture"] == arch), key=lambda r: r["l0"])
        text = [f"λ={r['sparsity']:g}, γ={r['shrinkage']:.2f}" for r in rows]
        for col, key in ((1, "loss_recovered"), (2, "fvu")):
            fig.add_trace(go.Scatter(x=[r["l0"] for r in rows], y=[r[key] for r in rows], mode="lines+markers+text",
                                     text=text, textposition="top center", textfont=dict(size=9),
                                     name=label, legendgroup=label, showlegend=col == 1,
                                     marker=dict(color=colours[arch], size=9)), row=1, col=col)
    for col, title in ((1, "loss recovered"), (2, "FVU")):
        fig.update_xaxes(title_text="L0 (features active per token)", type="log", row=1, col=col)
        fig.update_yaxes(title_text=title, row=1, col=col)
    width = results[0]["d_sae"]
    fig.update_layout(title=f"ReLU vs Gated SAEs, SmolLM2-135M {HOOK}, width {width}, "
                            f"{results[0]['training_tokens']:,} training tokens each", width=1200, height=520)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(figure_bytes(fig, "png", scale=1.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1152)
    parser.add_argument("--tokens", type=int, default=1024 * 120, help="training tokens per SAE (matched)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--relu-l1", default="2,5,12")
    parser.add_argument("--gated-l1", default="2,5,12")
    parser.add_argument("--cache-tokens", type=int, default=300_000,
                        help="the activation cache to train from (reused if already built)")
    parser.add_argument("--eval-tokens", type=int, default=1024)
    parser.add_argument("--caching-tokens", type=int, default=2048, help="tokens for the caching-throughput run")
    parser.add_argument("--out", default=None)
    parser.add_argument("--plot", default="bench/results/sae_pareto.png")
    args = parser.parse_args()
    torch.manual_seed(0)

    lm = load_model("smollm2-135m", device="cpu")
    report: dict = {"hook": HOOK, "threads": torch.get_num_threads(), "width": args.width,
                    "tokens_per_sae": args.tokens, "batch_size": args.batch_size, "lr": args.lr}
    report["caching"] = caching_throughput(lm, args.caching_tokens)

    specs = ([SAESpec("relu", args.width, float(x)) for x in args.relu_l1.split(",")]
             + [SAESpec("gated", args.width, float(x)) for x in args.gated_l1.split(",")])
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        saved = train_saes(lm, HOOK, specs, Path(tmp) / "sweep", tokens=args.tokens, cache_tokens=args.cache_tokens,
                           batch_size=args.batch_size, lr=args.lr, warmup_steps=10, resample_at=(0.5,),
                           dead_window_tokens=args.tokens // 4, checkpoint_every=0)
        train_seconds = time.perf_counter() - start
        saes = {name: load_sae(folder) for name, folder in saved.items()}
        meta = json.loads((Path(tmp) / "sweep" / "train_meta.json").read_text())
    report["training"] = {"seconds": train_seconds, "saes": len(specs), "cache_rows": meta["cache_rows"],
                          "tokens_per_s_all_saes": args.tokens / train_seconds,
                          "sae_tokens_per_s": args.tokens * len(specs) / train_seconds}
    start = time.perf_counter()
    evaluations = evaluate_saes(lm, list(saes.values()), n_tokens=args.eval_tokens)
    report["evaluation_seconds"] = time.perf_counter() - start
    results = []
    for (name, sae), spec, ev in zip(saes.items(), specs, evaluations, strict=True):
        row = {"name": name, "sparsity": spec.sparsity, "training_tokens": sae.cfg.training_tokens, **ev.summary()}
        results.append(row)
    report["sweep"] = results
    report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.plot:
        report["plot"] = args.plot
    text = json.dumps(to_plain(report), indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)
    if args.plot:
        plot(results, Path(args.plot))


if __name__ == "__main__":
    main()
