"""The backend on a CUDA GPU: agreement with the float32 CPU reference (interpscope.scale.tolerance) and timings; JSON.

Meant for a lent GPU machine that cannot download anything: the bundled SmolLM2 weights (~540 MB converted) do not
travel there, so with --random-weights the data dir gets a model folder with SmolLM2-135M's exact architecture and
tokenizer (config.json and tokenizer files from the converted bundle, copied to --bundle-files) and seeded random
weights under the bundled name. Timings are then those of the real size (they do not depend on the weights' values);
agreement is checked between devices on the same weights. Without --random-weights the real bundled model is used.

    python bench/cuda_check.py [--random-weights --bundle-files DIR] [--repeats 3] [--out FILE]

Agreement: relevance maps (AttnLRP, CP-LRP, Gradient x Input) at 64 and 512 tokens and their conservation readouts,
and the SAE evaluation summary (where the shipped SAE is present), each on cuda float32 / bfloat16 / float16 against
cpu float32, with the tolerance of that dtype. Timings: bench/backend_timings.timing_rows on cuda float32 (and the
relevance group in bfloat16). Every part runs on its own: one that fails is reported and the rest still run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# On a machine where the project is not installed (the GPU machine runs this file from a copied tree), the source
# root itself: backend/ holds the one import package, interpscope/.
sys.path.insert(0, str(ROOT / "backend"))



import numpy as np  # noqa: E402
import torch  # noqa: E402

SAE = ROOT / "assets" / "saes" / "smollm2-135m-blocks.15-gated-4608"
TOKENIZER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "chat_template.jinja")


def random_bundle(files: Path) -> dict:
    """Put a seeded random-weight SmolLM2-135M (the bundle's config and tokenizer) where the bundled model is read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from interpscope.models.smollm2 import cache_dir

    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (files / name).is_file():
            shutil.copy(files / name, target / name)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(target)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.save_pretrained(target, safe_serialization=True)
    return {"folder": str(target), "parameters": sum(p.numel() for p in model.parameters())}


def _part(out: dict, name: str, fn) -> None:
    started = time.perf_counter()
    try:
        out[name] = fn()
    except Exception as err:  # noqa: BLE001 - one part failing must not hide the others
        out[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
    print(json.dumps({"part": name, "seconds": round(time.perf_counter() - started, 1),
                      "ok": "error" not in (out[name] if isinstance(out[name], dict) else {})}), file=sys.stderr,
          flush=True)


GPU = "cuda"


def agreement() -> dict:
    from backend_timings import _text

    from interpscope.models import load_model
    from interpscope.relevance.api import explain
    from interpscope.scale.tolerance import relative_error, relevance_tolerance, tolerance

    runs = [("cpu", "float32"), (GPU, "float32"), (GPU, "bfloat16"), (GPU, "float16")]
    maps: dict = {}
    for device, dtype in runs:
        lm = load_model("smollm2-135m", device=device, dtype=dtype)
        for length in (64, 512):
            text = _text(lm, length)
            for method in ("attnlrp", "cplrp", "gradxinput"):
                result = explain(lm, text, method)
                cons = result.conservation
                maps[(device, dtype, length, method)] = (np.asarray(result.relevance, np.float64),
                                                        None if cons is None else cons.relative_error,
                                                        result.target.token_id)
    rows = []
    for (device, dtype, length, method), (rel, cons, target) in maps.items():
        if (device, dtype) == ("cpu", "float32"):
            continue
        ref_rel, ref_cons, ref_target = maps[("cpu", "float32", length, method)]
        tol = tolerance(getattr(torch, dtype))
        error = relative_error(rel, ref_rel)
        allowed = relevance_tolerance(getattr(torch, dtype), method)
        row = {"device": device, "dtype": dtype, "tokens": length, "method": method, "relevance_rel_l2": error,
               "relevance_tolerance": allowed, "same_target": target == ref_target,
               "relevance_close": bool(error <= allowed)}
        if cons is not None and ref_cons is not None:
            row.update(conservation=cons, conservation_cpu=ref_cons, conservation_tolerance=tol.conservation,
                       conservation_close=bool(abs(cons - ref_cons) <= tol.conservation))
        rows.append(row)
    return {"rows": rows, "all_close": all(r["relevance_close"] and r.get("conservation_close", True)
                                           for r in rows if r["same_target"])}


def sae_agreement(n_tokens: int) -> dict:
    from interpscope.models import load_model
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae
    from interpscope.scale.tolerance import sae_metrics_far

    sae = load_sae(SAE)
    summaries = {}
    for device, dtype in [("cpu", "float32"), (GPU, "float32"), (GPU, "bfloat16")]:
        lm = load_model("smollm2-135m", device=device, dtype=dtype)
        started = time.perf_counter()
        summary = evaluate_sae(lm, sae, n_tokens=n_tokens).summary()
        summaries[f"{device}/{dtype}"] = {"summary": summary, "seconds": time.perf_counter() - started}
    ref = summaries["cpu/float32"]["summary"]
    for key, value in summaries.items():
        value["far_from_cpu"] = sae_metrics_far(value["summary"], ref, getattr(torch, key.split("/")[1]))
    return summaries


def timings(repeats: int, dtype: str, only: list[str] | None) -> list[dict]:
    from backend_timings import timing_rows

    from interpscope.models import load_model

    lm = load_model("smollm2-135m", device=GPU, dtype=dtype)
    return timing_rows(lm, repeats=repeats, only=only, eval_tokens=4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--bundle-files", type=Path, default=None, help="config.json and tokenizer files")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sae-tokens", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--parts", default="agreement,sae,timings", help="comma-separated: agreement,sae,timings")
    parser.add_argument("--device", default="cuda", help="the device checked against cpu float32 (cpu: a dry run "
                                                         "of this script without a GPU)")
    args = parser.parse_args()
    global GPU
    GPU = args.device
    parts = args.parts.split(",")
    if GPU.startswith("cuda") and not torch.cuda.is_available():
        print("No CUDA device: this check needs a GPU (or --device cpu for a dry run).", file=sys.stderr)
        sys.exit(2)
    out: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if GPU.startswith("cuda") else GPU,
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "cpu_threads": torch.get_num_threads()}
    import transformers

    out["transformers"] = transformers.__version__
    if args.random_weights:
        _part(out, "random_weights", lambda: random_bundle(args.bundle_files))
    if "agreement" in parts:
        _part(out, "agreement", agreement)
    if "sae" in parts and SAE.is_dir():
        _part(out, "sae_agreement", lambda: sae_agreement(args.sae_tokens))
    if "timings" in parts:
        _part(out, f"timings_{GPU}_float32", lambda: timings(args.repeats, "float32", None))
        _part(out, f"timings_{GPU}_bfloat16", lambda: timings(args.repeats, "bfloat16", ["relevance"]))
    text = json.dumps(out, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
