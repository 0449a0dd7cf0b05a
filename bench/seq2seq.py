"""Cost of the encoder-decoder (T5) relevance pass against a plain gradient pass; prints one JSON object.

A random T5 of t5-small's shape (6 + 6 blocks, d_model 512, 8 heads of 64, d_ff 2048 gated-GELU as Flan-T5,
vocab 32128; no hub download, so no trained weights: the cost does not depend on them), float32, on the CPU (or
CUDA when present). For each source length, a decoder prefix of 8 tokens: the plain gradient (one forward + one
backward to both inputs' embeddings), Gradient x Input, CP-LRP and AttnLRP (with the conservation taps), interleaved
round by round; medians of the per-round ratios to the plain gradient, and each method's median seconds.

Run: OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python bench/seq2seq.py [--lengths 64 128 512] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from interpscope.adapters import get_adapter  # noqa: E402
from interpscope.relevance.rules import attnlrp_rules, cplrp_rules  # noqa: E402
from interpscope.relevance.seq2seq_engine import attribute_seq2seq, forward_seq2seq  # noqa: E402
from interpscope.relevance.targets import Target  # noqa: E402


def t5_small_shaped(device: torch.device):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
                      num_heads=8, feed_forward_proj="gated-gelu", dropout_rate=0.0, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = T5ForConditionalGeneration(config).to(device).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def plain_gradient(adapter, source_ids, decoder_ids, target: Target) -> None:
    embedding = adapter.embedding()
    with torch.enable_grad():
        source = embedding(source_ids).detach().requires_grad_(True)
        decoder = embedding(decoder_ids).detach().requires_grad_(True)
        value = target.value(forward_seq2seq(adapter, source, decoder, target.position)[0])
        torch.autograd.grad(value, [source, decoder])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 512])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = t5_small_shaped(device)
    adapter = get_adapter(model)
    runs = {
        "gradient": lambda s, d, t: plain_gradient(adapter, s, d, t),
        "gradxinput": lambda s, d, t: attribute_seq2seq(adapter, s, d, t, [], through_softmax=False,
                                                        conservation=False),
        "cplrp": lambda s, d, t: attribute_seq2seq(adapter, s, d, t, cplrp_rules(adapter), through_softmax=False),
        "attnlrp": lambda s, d, t: attribute_seq2seq(adapter, s, d, t, attnlrp_rules(adapter), through_softmax=True),
    }
    report: dict = {"device": str(device), "threads": torch.get_num_threads(), "loadavg": os.getloadavg(),
                    "model": "random T5, t5-small shape, gated-GELU, float32", "decoder_prefix": 8, "lengths": {}}
    generator = torch.Generator().manual_seed(1)
    for length in args.lengths:
        source = torch.randint(3, 32000, (1, length), generator=generator).to(device)
        decoder = torch.cat([torch.zeros(1, 1, dtype=torch.long),
                             torch.randint(3, 32000, (1, 8), generator=generator)], dim=1).to(device)
        target = Target(8, 5)
        for run in runs.values():  # warm-up
            run(source, decoder, target)
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                run(source, decoder, target)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - start)
        ratios = {name: statistics.median(s / g for s, g in zip(seconds[name], seconds["gradient"], strict=True))
                  for name in runs if name != "gradient"}
        report["lengths"][str(length)] = {"median_seconds": {n: statistics.median(v) for n, v in seconds.items()},
                                          "median_ratio_to_gradient": ratios}
        print(json.dumps({str(length): report["lengths"][str(length)]}), file=sys.stderr, flush=True)
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
