"""The correct-L0 proxy's input for a sweep folder: each SAE's decoder cosine c_dec over the latents that fire on
held-out activations (interpscope.sae.l0_proxy), kept as decoder_cosine.json in the sweep folder, which the Pareto
page reads (without it the page uses every decoder row, dead latents included).

Liveness is read on `--tokens` activations of the sweep's hook from the test split of its corpus (the model runs).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python scripts/sweep_l0_proxy.py \
        assets/sae_sweeps/smollm2-135m-blocks.15-resid-post
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope import atomic  # noqa: E402
from interpscope.outputs import OutputFolder  # noqa: E402
from interpscope.sae.folder import load_sae  # noqa: E402
from interpscope.sae.l0_proxy import PROXY_FILE, decoder_cosine, live_latents  # noqa: E402
from interpscope.sae.sweep import load_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep folder")
    parser.add_argument("--tokens", type=int, default=16384)
    args = parser.parse_args()
    folder = Path(args.sweep)
    table = load_table(folder)
    import numpy as np

    from interpscope.models import load_model
    from interpscope.sae.activations import build_activation_cache

    lm = load_model(table.model_name, device="cpu")
    cache = build_activation_cache(lm, table.hook_name, args.tokens, source=str(table.eval.get("source", "austen")),
                                   split="test", context_size=128, dtype="float32")
    rows = np.asarray(cache.array)
    out = {}
    for row in table.rows:
        sae_folder = folder / str(row.get("folder") or row["name"])
        if not (sae_folder / "sae_weights.safetensors").is_file():
            continue  # weights not shipped (the extra seeds): the page says so
        sae = load_sae(sae_folder)
        live = live_latents(sae, rows)
        out[row["name"]] = round(decoder_cosine(sae.W_dec.detach().double().numpy(), live), 6)
        print(row["name"], out[row["name"]], int(live.sum()), flush=True)
    owned = OutputFolder.claim(folder, force=True, command="sweep l0 proxy")
    atomic.write_json(folder / PROXY_FILE, {"c_dec": out, "tokens": args.tokens, "split": "test",
                                            "hook": table.hook_name}, indent=1)
    owned.record(PROXY_FILE)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
