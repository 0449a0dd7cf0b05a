"""Which steering strength keeps the edited continuation readable: a sweep over features and strengths.

For each feature (the best-explained live features of a store, plus any given) and each strength (multiples of the
feature's max activation on the store's corpus), `steer` runs the clean and the edited model on a prompt and
generates greedily. Printed per run (JSON): the strength, its size against the residual stream at the hook
(strength x ||W_dec[i]|| / median ||x|| over the prompt's positions from 1 on), the KL of the next-token
distribution, and three readability figures of the edited continuation: the share of its characters that are
letters or spaces, its distinct-token share, and its mean log-probability per token under the clean model
(fluency: a broken continuation like "20000000000" scores far below the clean one).

    nice -n 10 .venv/bin/python bench/steering_strength.py --store smollm2-135m-blocks.15-gated-4608 \
        [--features 2407,...] [--multiples 0.5,1,2,4] [--top 6] [--out bench-steering.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.capture import hooks  # noqa: E402
from interpscope.models import load_model  # noqa: E402
from interpscope.sae.store import FeatureStore, list_stores  # noqa: E402
from interpscope.sae.store.steering import steer  # noqa: E402

PROMPT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
          "want of a wife.")


def residual_norm(lm, hook: str, text: str) -> float:
    """Median ||x|| at the hook over the prompt's positions from 1 on (position 0 is the attention sink)."""
    seen: dict[str, torch.Tensor] = {}
    ids = lm.encode(text)
    with torch.no_grad(), hooks(lm.adapter, {hook: lambda t: seen.setdefault("x", t.detach())}, role="read"):
        lm.model(ids)
    return float(seen["x"][0, 1:].norm(dim=-1).median())


def fluency(lm, prompt: str, continuation: str) -> float:
    """Mean log p per token of the continuation under the clean model, given the prompt."""
    ids = lm.encode(prompt)
    new = torch.as_tensor(lm.tokenizer.encode(continuation, add_special_tokens=False), dtype=torch.long)[None]
    if new.shape[1] == 0:
        return float("nan")
    full = torch.cat([ids, new.to(ids.device)], 1)
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(full).logits[0, :-1].double(), -1)
    targets = full[0, 1:]
    picked = logp[torch.arange(targets.numel()), targets][ids.shape[1] - 1:]
    return float(picked.mean())


def readability(text: str, lm) -> dict:
    ids = lm.tokenizer.encode(text, add_special_tokens=False)
    letters = sum(c.isalpha() or c.isspace() or c in ",.;:'\"!?-" for c in text)
    return {"letter_share": letters / max(1, len(text)), "distinct_token_share": len(set(ids)) / max(1, len(ids))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="smollm2-135m-blocks.15-gated-4608")
    parser.add_argument("--features", default="")
    parser.add_argument("--top", type=int, default=6, help="best-explained live features to add")
    parser.add_argument("--multiples", default="0.5,1,2,4")
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    store = FeatureStore(next(p for p in list_stores() if p.name == args.store))
    lm = load_model(store.spec["model_name"], device="cpu")
    sae = store.load_sae()
    features = [int(f) for f in args.features.split(",") if f.strip()]
    scored = sorted(((e.get("score") or 0, f) for f, e in store.explanations.items()), reverse=True)
    features += [f for _, f in scored if f not in features][:args.top]
    norm = residual_norm(lm, store.spec["hook_name"], args.prompt)
    clean = steer(lm, sae, args.prompt, features[0], "add", 0.0, args.tokens)
    rows = [{"feature": None, "multiple": 0.0, "strength": 0.0, "kl": 0.0, "continuation": clean.edited_continuation,
             "fluency": fluency(lm, args.prompt, clean.edited_continuation),
             **readability(clean.edited_continuation, lm)}]
    for feature in features:
        max_act = float(store.max_activation[feature])
        dec_norm = float(sae.W_dec[feature].detach().norm())
        for multiple in (float(m) for m in args.multiples.split(",")):
            strength = multiple * max_act
            result = steer(lm, sae, args.prompt, feature, "add", strength, args.tokens)
            rows.append({"feature": feature, "explanation": store.explanations.get(feature, {}).get("explanation"),
                         "max_activation": max_act, "multiple": multiple, "strength": strength,
                         "share_of_residual_norm": strength * dec_norm / norm, "kl": result.kl,
                         "continuation": result.edited_continuation,
                         "fluency": fluency(lm, args.prompt, result.edited_continuation),
                         **readability(result.edited_continuation, lm)})
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    summary = {}
    for multiple in sorted({r["multiple"] for r in rows if r["feature"] is not None}):
        picked = [r for r in rows if r["multiple"] == multiple and r["feature"] is not None]
        summary[str(multiple)] = {k: float(np.nanmedian([r[k] for r in picked])) for k in (
            "share_of_residual_norm", "kl", "fluency", "letter_share", "distinct_token_share")}
    report = {"store": store.name, "prompt": args.prompt, "median_residual_norm": norm, "clean": rows[0],
              "by_multiple_median": summary, "runs": rows[1:]}
    text = json.dumps(report, indent=1, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
