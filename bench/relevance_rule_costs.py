"""What each part of AttnLRP costs: each rule set (and the conservation taps) against the same relevance pass without
any rule, A/B interleaved in one process on SmolLM2 (the order flips every round), by process CPU time with one
torch thread. Prints one JSON object: per part, the paired median ratio over rounds and its 95% bootstrap interval.

Parts: "act_up" (the activation identity rule with the gated product's half, and the up branch's half), "qkv" (the
query/key x 1/4 and value x 1/2 gradient scales), "norm" (the norm rule: the norm's own forward with the normaliser
detached), "cons_taps" (the conservation readout's taps and sums, no rule), "full" (AttnLRP with its readout, as
`attribute` runs it) and "run_method" (what the relevance page calls); --parts picks some.

Run alone on the machine: OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/relevance_rule_costs.py [--tokens 128]
[--rounds 50] [--parts qkv,norm]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--parts", default="", help="comma-separated part names to measure (default: all)")
    args = parser.parse_args()
    names = ("act_up", "qkv", "norm", "cons_taps", "full", "run_method")
    chosen = [name for name in args.parts.split(",") if name] or list(names)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        print(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(names)}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)

    from interpscope.capture import model_lock
    from interpscope.corpus import token_chunks
    from interpscope.models import load_model
    from interpscope.relevance import rules as R
    from interpscope.relevance.api import make_target, run_method
    from interpscope.relevance.engine import attribute

    lm = load_model("smollm2-135m")
    ids = token_chunks(lm.tokenizer, args.tokens, args.tokens, split="test")[:1]
    target = make_target(lm, ids)
    adapter = lm.adapter

    def relevance(rules, conservation: bool = False):
        def run() -> None:
            with model_lock(lm.model):
                attribute(adapter, ids, target, rules(adapter), conservation=conservation)
        return run

    bare = relevance(lambda a: [])
    parts = {"act_up": relevance(lambda a: [R.ActivationRule(0.5), R.mlp_up_scale(0.5)]),
             "qkv": relevance(lambda a: [R.qkv_scale(0.25, 0.25, 0.5)]),
             "norm": relevance(lambda a: [R.NormRule()]),
             "cons_taps": relevance(lambda a: [], True),
             "full": relevance(R.attnlrp_rules, True),
             "run_method": lambda: run_method(lm, ids, "attnlrp", target)}
    report: dict = {"model": lm.name, "tokens": args.tokens, "rounds": args.rounds, "torch_threads": 1,
                    "clock": "process CPU seconds", "load_average_start": os.getloadavg(), "parts": {}}
    assert set(parts) == set(names)
    for name in chosen:
        part = parts[name]
        for run in (part, bare, part, bare):  # warm-up
            run()
        ratios = []
        for index in range(args.rounds):
            order = [("bare", bare), ("part", part)]
            if index % 2:
                order.reverse()
            seconds = {}
            for key, run in order:
                start = time.process_time()
                run()
                seconds[key] = time.process_time() - start
            ratios.append(seconds["part"] / seconds["bare"])
        values = np.array(ratios)
        draws = np.random.default_rng(0).choice(values, size=(2000, values.size))
        low, high = np.quantile(np.median(draws, axis=1), [0.025, 0.975])
        report["parts"][name] = {"over_bare_paired_median": float(np.median(values)),
                                 "ci95": [float(low), float(high)]}
        print(json.dumps({name: report["parts"][name]}), file=sys.stderr, flush=True)
    report["load_average_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
