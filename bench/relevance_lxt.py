"""AttnLRP and CP-LRP against lxt (the AttnLRP paper's reference library), interleaved in one process on the same
SmolLM2 weights; prints one JSON object.

For each length and round, in a shuffled order: Interpscope's AttnLRP and CP-LRP (`run_method`, the relevance page's
one-pass computation), lxt 2.1's efficient AttnLRP and CP-LRP (its patch maps for Llama, applied to the model classes
for its own runs and removed after each), and a plain gradient pass (forward + backward to the input embeddings)
in two forms: "gradient", logits at the explained position only (what Interpscope's passes compute), and
"gradient_all_logits", lxt's own recipe with no patch on (every position's logits, as lxt's runs compute them). So
ours / gradient and lxt / gradient_all_logits are each method's rules over the same forward work, and ours / lxt
includes what the one-position logits save. "ours_attnlrp_map_only" is our AttnLRP map without the conservation
readout (lxt computes no books), so ours / gradient minus it is what the readout costs.
Each call is timed by the process CPU clock with one torch thread (on a shared machine the wall clock mostly measures
waiting; both are reported). Reported per length: the median over rounds of the paired ratios ours / lxt and
ours / gradient, and the agreement of the two maps (Pearson r and the largest absolute gap). Under `spread`:
the paired median's 95% bootstrap interval, the ratio of the medians and the ratio of the minimums (31 rounds at
64 and 128 tokens by default, 15 at 512: at 64 tokens one round's noise is as large as the 5% target).

lxt is not a dependency: install it beside the project, never into its venv,
    .venv/bin/pip install --no-deps --target build/lxt lxt==2.1
and run
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/relevance_lxt.py --lxt-path build/lxt
Without lxt importable the script says so and exits 2.

Three things lxt 2.1 needs on transformers 5.x, done here (not in lxt's files): its BERT module imports names that
5.x removed (`transformers.modeling_attn_mask_utils`, `find_pruneable_heads_and_indices`; its ViT map also needs
torchvision: stand-ins for those two modules are registered before lxt is imported, as the Llama map used here needs
neither); its Llama
AttnLRP patch replaces the module's attention registry with a plain dict and its CP-LRP patch rewrites transformers'
global ALL_ATTENTION_FUNCTIONS in place (both undone after every lxt run: the registry object and its entries are
saved and restored, with the patched classes' forwards and eager_attention_forward).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from interpscope.capture import model_lock  # noqa: E402
from interpscope.corpus import token_chunks  # noqa: E402
from interpscope.models import load_model  # noqa: E402
from interpscope.relevance.api import make_target, run_method  # noqa: E402
from interpscope.relevance.engine import attribute, gradient_only  # noqa: E402
from interpscope.relevance.rules import attnlrp_rules  # noqa: E402


def import_lxt(path: str | None):
    """lxt's efficient module and its Llama patch maps, or None when lxt cannot be imported."""
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    # lxt's BERT map imports names transformers 5.x removed (modeling_attn_mask_utils,
    # find_pruneable_heads_and_indices) and its ViT map imports torchvision, both at module level; only its Llama map
    # is used here, so those two entries are stand-ins that map nothing
    for name, module_attr, map_attr in (("bert", "modeling_bert", "attnLRP"),
                                        ("vit_torch", "vision_transformer", "cp_LRP")):
        full = f"lxt.efficient.models.{name}"
        if full not in sys.modules:
            stub = types.ModuleType(full)
            setattr(stub, module_attr, types.ModuleType(f"{module_attr}_unused"))
            setattr(stub, map_attr, {})
            sys.modules[full] = stub
    try:
        from lxt.efficient import monkey_patch
        from lxt.efficient.models import llama as lxt_llama
    except ImportError as err:
        print(f"lxt is not importable ({err}); install it with "
              "`.venv/bin/pip install --no-deps --target build/lxt lxt==2.1`", file=sys.stderr)
        return None
    return monkey_patch, lxt_llama


@contextmanager
def lxt_patched(lxt, variant: str):
    """lxt's Llama patch map (`attnLRP` or `cp_LRP`) applied for the block, everything it touched restored after."""
    from torch.nn import Dropout
    from transformers import modeling_utils
    from transformers.models.llama import modeling_llama

    monkey_patch, lxt_llama = lxt
    patch_map = lxt_llama.attnLRP if variant == "attnlrp" else lxt_llama.cp_LRP
    saved_forwards = {cls: cls.forward for cls in patch_map if isinstance(cls, type)}
    saved_eager = modeling_llama.eager_attention_forward
    saved_registry = modeling_llama.ALL_ATTENTION_FUNCTIONS
    global_registry = modeling_utils.ALL_ATTENTION_FUNCTIONS
    saved_local = dict(global_registry._local_mapping)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            monkey_patch(modeling_llama, patch_map)
        if isinstance(modeling_llama.ALL_ATTENTION_FUNCTIONS, dict):  # lxt's AttnLRP map left a plain dict
            registry = type(saved_registry)()
            for key, value in modeling_llama.ALL_ATTENTION_FUNCTIONS.items():
                registry[key] = value
            modeling_llama.ALL_ATTENTION_FUNCTIONS = registry
        yield
    finally:
        for cls, forward in saved_forwards.items():
            cls.forward = forward
        modeling_llama.eager_attention_forward = saved_eager
        modeling_llama.ALL_ATTENTION_FUNCTIONS = saved_registry
        global_registry._local_mapping.clear()  # lxt's CP-LRP map wrote its wrappers into the shared registry
        global_registry._local_mapping.update(saved_local)
        assert Dropout.forward is saved_forwards.get(Dropout, Dropout.forward)


def lxt_relevance(lm, ids: torch.Tensor, target) -> np.ndarray:
    """lxt's recipe: input embeddings as a leaf, the target logit's backward under the patches, embeds * grad."""
    with torch.enable_grad():
        embeds = lm.adapter.embedding()(ids).detach().requires_grad_(True)
        logits = lm.model(inputs_embeds=embeds, use_cache=False).logits
        value = target.value(logits[0, target.position])
        value.backward()
        return (embeds * embeds.grad).sum(-1)[0].detach().double().numpy()


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(lm, lxt, length: int, rounds: int, rng: random.Random) -> dict:
    """Paired CPU-time ratios over `rounds` shuffled rounds at one length, and how far the two maps agree."""
    ids = token_chunks(lm.tokenizer, length, length, split="test")[:1]
    target = make_target(lm, ids)
    ours = run_method(lm, ids, "attnlrp", target)[0].relevance.astype(np.float64)
    with lxt_patched(lxt, "attnlrp"):
        theirs = lxt_relevance(lm, ids, target)
    ours_cp = run_method(lm, ids, "cplrp", target)[0].relevance.astype(np.float64)
    with lxt_patched(lxt, "cplrp"):
        theirs_cp = lxt_relevance(lm, ids, target)

    def lxt_run(variant: str):
        def run() -> tuple[float, float]:
            with lxt_patched(lxt, variant):  # patching is set-up, outside the timed call
                return timed(lambda: lxt_relevance(lm, ids, target))
        return run

    def map_only() -> None:
        """Our AttnLRP map without the conservation readout (lxt computes no books): what the readout costs."""
        with model_lock(lm.model):
            attribute(lm.adapter, ids, target, attnlrp_rules(lm.adapter), conservation=False)

    calls = {"ours_attnlrp": lambda: timed(lambda: run_method(lm, ids, "attnlrp", target)),
             "ours_attnlrp_map_only": lambda: timed(map_only),
             "ours_cplrp": lambda: timed(lambda: run_method(lm, ids, "cplrp", target)),
             "lxt_attnlrp": lxt_run("attnlrp"), "lxt_cplrp": lxt_run("cplrp"),
             "gradient": lambda: timed(lambda: gradient_only(lm.adapter, ids, target)),
             # lxt's recipe with no patch on: every position's logits (lxt's runs compute them all), so lxt / this is
             # lxt's rules alone, beside ours / "gradient" (both sides doing the same forward work)
             "gradient_all_logits": lambda: timed(lambda: lxt_relevance(lm, ids, target))}
    for fn in calls.values():  # warm-up
        fn()
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    wall: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            w, c = calls[name]()
            cpu[name].append(c)
            wall[name].append(w)

    def ratio(a: str, b: str, clock: dict) -> float:
        return statistics.median(x / y for x, y in zip(clock[a], clock[b], strict=True))

    def spread(a: str, b: str) -> dict:
        """The paired ratio's 95% interval (bootstrap over rounds, seeded) and two unpaired readings of the same
        comparison (ratio of the medians, ratio of the minimums), so a reader sees how much the figure is noise."""
        paired = np.array(cpu[a]) / np.array(cpu[b])
        draws = np.random.default_rng(0).choice(paired, size=(2000, paired.size))
        low, high = np.quantile(np.median(draws, axis=1), [0.025, 0.975])
        return {"paired_median_ci95": [float(low), float(high)],
                "ratio_of_medians": statistics.median(cpu[a]) / statistics.median(cpu[b]),
                "ratio_of_minimums": min(cpu[a]) / min(cpu[b])}

    return {
        "median_cpu_seconds": {name: statistics.median(v) for name, v in cpu.items()},
        "median_wall_seconds": {name: statistics.median(v) for name, v in wall.items()},
        "attnlrp_over_lxt": ratio("ours_attnlrp", "lxt_attnlrp", cpu),
        "cplrp_over_lxt": ratio("ours_cplrp", "lxt_cplrp", cpu),
        "attnlrp_over_gradient": ratio("ours_attnlrp", "gradient", cpu),
        "attnlrp_map_only_over_gradient": ratio("ours_attnlrp_map_only", "gradient", cpu),
        "cplrp_over_gradient": ratio("ours_cplrp", "gradient", cpu),
        "lxt_attnlrp_over_gradient": ratio("lxt_attnlrp", "gradient", cpu),
        "lxt_attnlrp_over_gradient_all_logits": ratio("lxt_attnlrp", "gradient_all_logits", cpu),
        "lxt_cplrp_over_gradient_all_logits": ratio("lxt_cplrp", "gradient_all_logits", cpu),
        "gradient_all_logits_over_gradient": ratio("gradient_all_logits", "gradient", cpu),
        "attnlrp_over_lxt_wall": ratio("ours_attnlrp", "lxt_attnlrp", wall),
        "spread": {"attnlrp_over_gradient": spread("ours_attnlrp", "gradient"),
                   "attnlrp_map_only_over_gradient": spread("ours_attnlrp_map_only", "gradient"),
                   "attnlrp_over_lxt": spread("ours_attnlrp", "lxt_attnlrp"),
                   "cplrp_over_lxt": spread("ours_cplrp", "lxt_cplrp"),
                   "lxt_attnlrp_over_gradient_all_logits": spread("lxt_attnlrp", "gradient_all_logits")},
        "cpu_seconds_per_round": cpu,  # every round's figures, in order: runs can be pooled or re-read later
        "maps": {"attnlrp_pearson": float(np.corrcoef(ours, theirs)[0, 1]),
                 "attnlrp_max_abs_gap": float(np.abs(ours - theirs).max()),
                 "cplrp_pearson": float(np.corrcoef(ours_cp, theirs_cp)[0, 1]),
                 "cplrp_max_abs_gap": float(np.abs(ours_cp - theirs_cp).max())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lxt-path", default=str(ROOT / "build" / "lxt"), help="folder lxt was installed into")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 512])
    parser.add_argument("--rounds", type=int, nargs="+", default=[31, 31, 15],
                        help="rounds per length (one number: every length); more at the short lengths, where a pass "
                             "is short and the noise of one round is as large as the target")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lxt = import_lxt(args.lxt_path)
    if lxt is None:
        return 2
    torch.set_num_threads(1)
    lm = load_model("smollm2-135m", device="cpu")
    rng = random.Random(args.seed)
    rounds = args.rounds * len(args.lengths) if len(args.rounds) == 1 else args.rounds
    if len(rounds) != len(args.lengths):
        print(f"--rounds takes one number or one per length ({len(args.lengths)})", file=sys.stderr)
        return 2
    report: dict = {"model": lm.name, "torch_threads": torch.get_num_threads(),
                    "rounds": dict(zip(map(str, args.lengths), rounds, strict=True)),
                    "clock": "process CPU seconds (one torch thread); wall seconds beside",
                    "load_average_start": os.getloadavg()}
    for length, n_rounds in zip(args.lengths, rounds, strict=True):
        report[str(length)] = measure(lm, lxt, length, n_rounds, rng)
        print(json.dumps({length: report[str(length)]}), file=sys.stderr, flush=True)
    report["load_average_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
