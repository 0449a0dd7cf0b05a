"""MambaLRP benchmarks on the shipped Mamba LM (mamba-tiny). Prints JSON (and writes it with --out).

cost: seconds of one MambaLRP relevance pass / one plain gradient pass (target logit w.r.t. the input
  embeddings), both through the same pure-PyTorch forward (interpscope.relevance.mamba.forward swapped into the
  model: all four fixes on vs all off) at --tokens tokens; median of --repeat runs each, interleaved. Target <= 2.
faithfulness: token-flipping curves (MoRF / LeRF, embeddings zeroed, 10 steps) and ABPC (area between them,
  higher = better) of MambaLRP, Gradient x Input and Integrated Gradients (captum, 32 steps) on --prompts held-out
  prompts (Austen, test split), each explained for its predicted next token; mean curves on a common grid.
  Zeroing the LAST token's embedding zeroes a Mamba's logit outright (in_proj has no bias, so the gate SiLU(z) is
  0 at that position in every layer), so the standard curves mostly test where a map ranks the last token; the
  "context" curves therefore also flip only the earlier tokens, the last one always kept.

Run:  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/mamba_lrp.py --out bench/results/mamba_lrp.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from interpscope.capture import model_lock
from interpscope.corpus import paragraphs, sample_prompts, token_stream  # noqa: E402
from interpscope.models import load_model  # noqa: E402
from interpscope.relevance.api import explain, faithfulness, make_target  # noqa: E402
from interpscope.relevance.engine import forward_logits  # noqa: E402
from interpscope.relevance.faithfulness import removal_counts  # noqa: E402
from interpscope.relevance.mamba.forward import Fixes  # noqa: E402
from interpscope.relevance.mamba.rule import mamba_lrp  # noqa: E402
from interpscope.relevance.targets import Target  # noqa: E402

METHODS = ("mambalrp", "gradxinput", "ig")
GRID = np.linspace(0.0, 1.0, 11)


def one_pass(lm, ids: torch.Tensor, target: Target, fixes: Fixes) -> float:
    """Seconds of forward + backward to the input embeddings under the pure-PyTorch forward with `fixes`."""
    start = time.perf_counter()
    with mamba_lrp(lm, fixes) as adapter, torch.enable_grad():
        embeds = adapter.embedding()(ids).detach().requires_grad_(True)
        value = target.value(forward_logits(adapter.model, embeds, [target.position])[0, 0])
        (grad,) = torch.autograd.grad(value, [embeds])
        (embeds * grad).sum(-1)
    return time.perf_counter() - start


def cost(lm, n_tokens: int, repeat: int) -> dict:
    ids = token_stream(lm.tokenizer, paragraphs(split="test"), max_tokens=n_tokens).view(1, -1).to(lm.device)
    target = make_target(lm, ids)
    one_pass(lm, ids, target, Fixes())  # warm-up
    lrp, grad = [], []
    for _ in range(repeat):
        lrp.append(one_pass(lm, ids, target, Fixes()))
        grad.append(one_pass(lm, ids, target, Fixes.none()))
    ratio = statistics.median(lrp) / statistics.median(grad)
    return {"tokens": int(ids.shape[1]), "repeat": repeat, "mambalrp_s": statistics.median(lrp),
            "gradient_s": statistics.median(grad), "ratio": ratio, "target_ratio": 2.0, "meets_target": ratio <= 2.0}


def context_curves(lm, ids: torch.Tensor, target: Target, relevance: np.ndarray, steps: int = 10):
    """MoRF / LeRF values flipping only tokens 0..T-2 (embedding zeroed), the last token kept; (fractions, morf,
    lerf, abpc)."""
    n_context = int(ids.shape[1]) - 1
    counts = removal_counts(n_context, steps)
    most_first = np.argsort(-np.asarray(relevance[:n_context]), kind="stable")
    masks = []
    for order in (most_first, most_first[::-1]):
        for count in counts:
            keep = torch.ones(ids.shape[1], dtype=torch.bool)
            keep[torch.as_tensor(order[:count].copy(), dtype=torch.long)] = False
            masks.append(keep)
    with torch.no_grad():
        embeds = lm.adapter.embedding()(ids)
        batch = embeds.expand(len(masks), -1, -1) * torch.stack(masks)[:, :, None].to(embeds.dtype)
        values = target.value(forward_logits(lm.model, batch, [target.position])[:, 0]).double().cpu().numpy()
    fractions = np.array(counts, dtype=np.float64) / n_context
    morf, lerf = values[:len(counts)], values[len(counts):]
    return fractions, morf, lerf, float(np.trapezoid(lerf, fractions) - np.trapezoid(morf, fractions))


def faithfulness_study(lm, n_prompts: int) -> dict:
    texts = sample_prompts(n_prompts, split="test")
    abpc = {m: [] for m in METHODS}
    morf = {m: [] for m in METHODS}
    lerf = {m: [] for m in METHODS}
    seconds = {m: 0.0 for m in METHODS}
    context = {m: {"abpc": [], "morf": [], "lerf": []} for m in METHODS}
    for index, text in enumerate(texts):
        ids = lm.encode(text)
        target = make_target(lm, ids)
        for method in METHODS:
            result = explain(lm, method=method, input_ids=ids, target=target)
            curves = faithfulness(lm, result)
            seconds[method] += result.seconds
            abpc[method].append(curves.abpc)
            morf[method].append(np.interp(GRID, curves.fractions, curves.morf))
            lerf[method].append(np.interp(GRID, curves.fractions, curves.lerf))
            with model_lock(lm):
                fractions, c_morf, c_lerf, c_abpc = context_curves(lm, ids, target, result.relevance)
            context[method]["abpc"].append(c_abpc)
            context[method]["morf"].append(np.interp(GRID, fractions, c_morf))
            context[method]["lerf"].append(np.interp(GRID, fractions, c_lerf))
        print(f"prompt {index + 1}/{len(texts)}", file=sys.stderr, flush=True)
    summary = {}
    for m in METHODS:
        summary[m] = {"mean_abpc": float(np.mean(abpc[m])), "std_abpc": float(np.std(abpc[m])),
                      "sem_abpc": float(np.std(abpc[m]) / np.sqrt(len(abpc[m]))),
                      "mean_morf": np.mean(morf[m], axis=0).tolist(), "mean_lerf": np.mean(lerf[m], axis=0).tolist(),
                      "seconds_total": seconds[m],
                      "context_only": {"mean_abpc": float(np.mean(context[m]["abpc"])),
                                       "sem_abpc": float(np.std(context[m]["abpc"]) / np.sqrt(len(texts))),
                                       "mean_morf": np.mean(context[m]["morf"], axis=0).tolist(),
                                       "mean_lerf": np.mean(context[m]["lerf"], axis=0).tolist()}}
    wins = {f"mambalrp_beats_{m}": int(np.sum(np.array(abpc["mambalrp"]) > np.array(abpc[m])))
            for m in METHODS if m != "mambalrp"}
    wins.update({f"context_only_mambalrp_beats_{m}": int(np.sum(np.array(context["mambalrp"]["abpc"])
                                                                 > np.array(context[m]["abpc"])))
                 for m in METHODS if m != "mambalrp"})
    return {"prompts": len(texts), "fractions": GRID.tolist(), "methods": summary, "per_prompt_wins": wins}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mamba-tiny")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--skip-faithfulness", action="store_true")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lm = load_model(args.model, device="cpu")
    report = {"model": args.model, "device": str(lm.device), "threads": torch.get_num_threads(),
              "cost": cost(lm, args.tokens, args.repeat)}
    print(json.dumps(report["cost"]), file=sys.stderr, flush=True)
    if not args.skip_faithfulness:
        report["faithfulness"] = faithfulness_study(lm, args.prompts)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
