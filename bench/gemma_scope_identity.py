"""Hook placement of Gemma Scope 2 dictionaries on the real Gemma 3 270M: identity-like JumpReLU SAEs (features
relu(x_i) and relu(-x_i), thresholds 0, so x_hat = x) written in the published layout inside a Hugging Face cache,
loaded by release name with HF_HUB_OFFLINE=1 and evaluated with the SAE spliced in (interpscope.sae.evaluation).
FVU ~0 and loss recovered ~1 say the release's hook resolves to an activation of the model's width that the
splice puts back unchanged; the test suite checks the module each hook name means on a tiny Gemma 3
(tests/sae/test_released_formats.py).

    .venv/bin/python bench/gemma_scope_identity.py [--tokens 2048]

Writes bench/reference/gemma_scope_identity.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "reference" / "gemma_scope_identity.json"
CASES = ("gemma-scope-2-270m-pt-res/layer_12_width_16k_l0_medium",
         "gemma-scope-2-270m-pt-mlp/layer_5_width_16k_l0_small",
         "gemma-scope-2-270m-pt-res-all/layer_0_width_16k_l0_small")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "backend"), str(ROOT)]
    import torch

    from interpscope.models.loading import load_model
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae
    from interpscope.sae.releases import find, resolve
    from tests.released import identity_tensors, write_gemma_scope_2

    started = time.perf_counter()
    lm = load_model("gemma3-270m", device="cpu", dtype="float32")
    load_seconds = time.perf_counter() - started
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(HF_HUB_CACHE=str(Path(tmp) / "hub"), HF_HUB_OFFLINE="1",
                          INTERPSCOPE_DATA_DIR=str(Path(tmp) / "data"))
        for name in CASES:
            entry = find(name)
            write_gemma_scope_2(Path(tmp) / "hub", entry.path, identity_tensors(lm.adapter.d_model))
            sae = load_sae(resolve(name, model_name=lm.name))
            with torch.no_grad():
                report = evaluate_sae(lm, sae, n_tokens=args.tokens, context_size=128, batch_size=4)
            summary = report.summary()
            rows.append({"release": name, "hook": sae.cfg.hook_name, "fvu": report.fvu,
                         "loss_recovered": report.loss_recovered, "ce_clean": summary["ce_clean"],
                         "ce_sae": summary["ce_sae"], "ce_zero": summary["ce_zero"], "l0": report.l0})
            print(f"{name}: {sae.cfg.hook_name} FVU {report.fvu:.3g}, loss recovered {report.loss_recovered:.6f}")
    document = {"command": f"python bench/gemma_scope_identity.py --tokens {args.tokens}", "model": lm.name,
                "device": "cpu", "dtype": "float32", "model_load_seconds": round(load_seconds, 1), "cases": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
