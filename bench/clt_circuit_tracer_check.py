"""Does circuit-tracer read the shipped CLT as Interpscope does (issue 43.3: "in the format circuit-tracer reads")?
circuit-tracer 0.5.0's own load_clt, in its venv (see bench/graph_circuit_tracer.py for its setup), loads
assets/clt/<model> and computes every layer's features and every block's output for random inputs; Interpscope's
load_clt does the same here. Writes the largest differences (and the outputs' scale) to --out and prints them.

Run: .venv/bin/python bench/clt_circuit_tracer_check.py --ct-python /work/ct-venv/bin/python \
         --out bench/reference/clt-circuit-tracer-load.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKER = """
import json, sys, torch
from circuit_tracer.transcoder.cross_layer_transcoder import load_clt
path, inputs, out = sys.argv[1:4]
clt = load_clt(path, dtype=torch.float32, device=torch.device("cpu"), lazy_decoder=False)
x = torch.load(inputs)
with torch.no_grad():
    features = clt.encode(x)
    outputs = clt.forward(x)
torch.save({"features": features, "outputs": outputs}, out)
import circuit_tracer
print(json.dumps({"circuit_tracer": getattr(circuit_tracer, "__version__", "0.5.0")}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clt", default=str(ROOT / "assets" / "clt" / "smollm2-135m"))
    parser.add_argument("--ct-python", default="/work/ct-venv/bin/python")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    from interpscope.sae.clt import load_clt

    clt = load_clt(args.clt)
    x = torch.randn(clt.n_layers, 16, clt.d_in, generator=torch.Generator().manual_seed(0)) * 3
    with tempfile.TemporaryDirectory() as tmp:
        inputs, theirs = Path(tmp) / "x.pt", Path(tmp) / "theirs.pt"
        torch.save(x, inputs)
        done = subprocess.run([args.ct_python, "-c", WORKER, args.clt, str(inputs), str(theirs)], capture_output=True,
                              text=True, check=True)
        other = torch.load(theirs)
    with torch.no_grad():
        features = clt.encode(x)
        outputs = clt.decode(features, x)
    report = {"clt": args.clt, "versions": json.loads(done.stdout.strip().splitlines()[-1]),
              "features_max_abs_diff": float((features - other["features"]).abs().max()),
              "features_scale": float(other["features"].abs().max()),
              "outputs_max_abs_diff": float((outputs - other["outputs"]).abs().max()),
              "outputs_scale": float(other["outputs"].abs().max()), "inputs": list(x.shape)}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
