"""Which token (or none) to put before a user's text, measured per bundled model on the held-out prompts.

For each candidate prefix (none, and each of the tokenizer's special tokens: its BOS, EOS, pad, ...), every
held-out prompt (assets/prompts/heldout-v1.jsonl: a text and its expected next word) runs once; the table gives
the top-1 accuracy on the expected word's first token, and how strongly the first position becomes an attention
sink (the median over prompts of its residual norm at the middle block over the median of the other positions'
norms, interpscope.sinks.others_median_ratio). The default the product uses (interpscope.models.registry,
BundledModel.prefix_token) is the candidate with the highest accuracy among those that put a token before the text,
so the text's first word is never the sink and is explained like any other word.

    nice -n 10 .venv/bin/python scripts/measure_prefix_tokens.py [--models smollm2-135m,gemma3-270m] [--out FILE]

Prints one JSON document (and writes it to --out); docs/reference/prefix-tokens.md shows the table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def candidates(tokenizer) -> list[tuple[str, int | None]]:
    """(label, token id) of every prefix to try: none first, then each distinct special token."""
    found: list[tuple[str, int | None]] = [("(none)", None)]
    seen: set[int] = set()
    names = [getattr(tokenizer, f"{kind}_token", None) for kind in ("bos", "eos", "pad", "unk")]
    names += list(getattr(tokenizer, "additional_special_tokens", []) or [])[:6]
    for name in names:
        if not name:
            continue
        token_id = tokenizer.convert_tokens_to_ids(name)
        if isinstance(token_id, int) and token_id >= 0 and token_id not in seen:
            seen.add(token_id)
            found.append((name, token_id))
    return found


def measure(name: str, prompts: list[dict]) -> dict:
    from interpscope.capture import capture
    from interpscope.models import load_model
    from interpscope.sinks import others_median_ratio

    lm = load_model(name, device="cpu", dtype="float32")
    tokenizer, adapter = lm.tokenizer, lm.adapter
    middle = f"blocks.{adapter.n_layers // 2}.hook_resid_post"
    adds = int(tokenizer("a").input_ids[0]) == getattr(tokenizer, "bos_token_id", -1)
    rows = []
    for label, prefix in candidates(tokenizer):
        correct, ratios, start = 0, [], time.perf_counter()
        for prompt in prompts:
            ids = lm.encode(prompt["text"])
            if adds and ids.shape[1] and int(ids[0, 0]) == tokenizer.bos_token_id:
                ids = ids[:, 1:]  # the tokenizer's own BOS is one of the candidates, not a given
            if prefix is not None:
                ids = torch.cat([torch.tensor([[prefix]]), ids], dim=1)
            expected = tokenizer(prompt["expected"], add_special_tokens=False).input_ids[0]
            with torch.no_grad():
                run = capture(adapter, ids, [middle])
            correct += int(int(run.require_logits()[-1].argmax()) == int(expected))
            ratios.append(float(others_median_ratio(run.activations[middle])[0]))
        rows.append({"prefix": label, "token_id": prefix, "correct": correct, "n": len(prompts),
                     "accuracy": correct / len(prompts), "sink_ratio_median": statistics.median(ratios),
                     "seconds": round(time.perf_counter() - start, 1)})
    prefixed = [r for r in rows if r["token_id"] is not None]
    best = max(prefixed, key=lambda r: (r["accuracy"], -prefixed.index(r)))
    return {"model": name, "tokenizer_adds_bos": adds, "middle_block": adapter.n_layers // 2, "rows": rows,
            "chosen": best["prefix"], "chosen_token_id": best["token_id"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--out", default=None, help="also write the document here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "backend"))
    prompts = [json.loads(line) for line in (ROOT / "assets" / "prompts" / "heldout-v1.jsonl").read_text().splitlines()
               if line.strip()]
    document = {"prompts": "assets/prompts/heldout-v1.jsonl", "n_prompts": len(prompts),
                "models": [measure(name.strip(), prompts) for name in args.models.split(",") if name.strip()]}
    text = json.dumps(document, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
