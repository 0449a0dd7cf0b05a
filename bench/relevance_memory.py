"""Memory of one AttnLRP pass beside a plain gradient pass on SmolLM2 (issue 24's memory trims): per length,
  - held_mb: bytes of the distinct storages autograd keeps for the backward at the end of the forward (parameters
    included: the matmuls keep their weights);
  - minor_faults: median page faults a pass over --passes passes in one process (0 means the allocator reuses
    what it freed; fresh pages cost a fault and a zeroing each);
  - peak_rss_growth_mb: in a fresh process per method, how far one pass raises the peak resident set (VmHWM) over
    the resident set after loading the model and the input (Linux).
Prints one JSON object with the load average at start and end.

Run alone on the machine: nice -n 10 .venv/bin/python bench/relevance_memory.py [--lengths 128 2048] [--passes 5]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def setup(length: int):
    from interpscope.corpus import token_chunks
    from interpscope.models import load_model
    from interpscope.relevance.api import make_target

    lm = load_model("smollm2-135m", device="cpu")
    ids = token_chunks(lm.tokenizer, length, length, split="test")[:1]
    return lm, ids, make_target(lm, ids)


def one_pass(lm, ids, target, method: str) -> None:
    from interpscope.capture import model_lock
    from interpscope.relevance import rules as R
    from interpscope.relevance.engine import attribute, gradient_only

    if method == "gradient":
        gradient_only(lm.adapter, ids, target)
        return
    with model_lock(lm.model):
        attribute(lm.adapter, ids, target, R.attnlrp_rules(lm.adapter), conservation=True)


def held_mb(lm, ids, target, method: str) -> float:
    from interpscope.relevance import rules as R
    from interpscope.relevance.engine import applied, forward_logits

    kept: list = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept.append(weakref.ref(tensor))
        return tensor
    rules = [] if method == "gradient" else R.attnlrp_rules(lm.adapter)
    with torch.enable_grad(), applied(lm.adapter, rules), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        embeds = lm.adapter.embedding()(ids).detach().requires_grad_(True)
        logits = forward_logits(lm.model, embeds, [target.position])
        gc.collect()
        alive = [t for r in kept if (t := r()) is not None]
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}
        del logits
    return sum(storages.values()) / 2**20


def _high_water_mb() -> float:
    """The process's peak resident set (VmHWM) in MB. Not getrusage's ru_maxrss: Linux keeps that across fork and
    exec, so a child started by a parent that had already run 2,048-token passes reported the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def peak_growth(method: str, length: int) -> None:
    """Child process: load, then one pass; print how far the pass raised the peak RSS over the resident set it
    started from, in MB (the high-water mark is reset to the current RSS first, so loading's peak is not counted)."""
    lm, ids, target = setup(length)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    before = _high_water_mb()
    one_pass(lm, ids, target, method)
    print(_high_water_mb() - before)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 2048])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peak_growth(args.child[0], int(args.child[1]))
        return 0
    report: dict = {"model": "smollm2-135m", "torch_threads": torch.get_num_threads(),
                    "load_average_start": os.getloadavg(), "lengths": {}}
    for length in args.lengths:
        lm, ids, target = setup(length)
        row: dict = {}
        for method in ("gradient", "attnlrp"):
            one_pass(lm, ids, target, method)  # warm-up
            faults = []
            for _ in range(args.passes):
                start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                one_pass(lm, ids, target, method)
                faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
            child = subprocess.run([sys.executable, __file__, "--child", method, str(length)], capture_output=True,
                                   text=True, check=True)
            row[method] = {"held_mb": held_mb(lm, ids, target, method), "minor_faults": statistics.median(faults),
                           "peak_rss_growth_mb": float(child.stdout.strip().splitlines()[-1])}
        report["lengths"][str(length)] = row
        print(json.dumps({length: row}), file=sys.stderr, flush=True)
    report["load_average_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
