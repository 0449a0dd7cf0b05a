"""Interpscope's Gemma Scope 2 loader against SAELens's own loader, on dictionaries synthesised in the published
layout inside a Hugging Face cache, both loading them by release name with HF_HUB_OFFLINE=1.

    .venv/bin/python bench/saelens_interop.py --saelens-python /work/saelens-venv/bin/python

Writes bench/reference/saelens_interop.json: per dictionary the largest absolute difference between the two
libraries' feature activations (encode) and outputs (forward: with the affine skip for transcoders), on 512 random
inputs at Gemma 3 270M's width (d_model 640), width 16384. SAELens runs in its own virtual environment (the test suite
never imports it): this script calls that environment's python on itself with --saelens-side.

SAELens's Gemma Scope 2 loader reads the tensor shapes with HTTP range requests to the hub
(get_safetensors_tensor_shapes), which HF_HUB_OFFLINE does not cover; the SAELens side replaces that one function with
a reader of the same header from the cached file (the same bytes the request would fetch). Everything else runs as
published.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "reference" / "saelens_interop.json"
CASES = [  # (release, sae_id, config.json written or not)
    ("gemma-scope-2-270m-pt-res", "layer_12_width_16k_l0_medium", False),
    ("gemma-scope-2-270m-pt-transcoders-all", "layer_3_width_16k_l0_small_affine", True),
    ("gemma-scope-2-270m-pt-transcoders-all", "layer_3_width_16k_l0_small", False),
    ("llama_scope_lxr_8x", "l0r_8x", False),  # Llama Scope (lm-saes folder), read by folder on Interpscope's side
]
D_MODEL, WIDTH, ROWS = 640, 16384, 512
LLAMA = {"repo_id": "fnlp/Llama3_1-8B-Base-LXR-8x", "path": "Llama3_1-8B-Base-L0R-8x",
         "norm_scaling_factor": 58.935251798561154}  # SAELens's directory entry for l0r_8x


LLAMA_D, LLAMA_WIDTH = 256, 2048


def write_llama_scope(cache: Path, d_model: int) -> Path:
    """A Llama Scope folder (hyperparams.json + checkpoints/final.safetensors) in the cache, its average input norm
    the one SAELens's directory implies for l0r_8x (sqrt(d_model) / norm_scaling_factor)."""
    import torch
    from safetensors.torch import save_file

    from tests.released import snapshot

    folder = snapshot(cache, LLAMA["repo_id"]) / LLAMA["path"]
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(11)
    scale = LLAMA["norm_scaling_factor"]
    save_file({"encoder.weight": torch.randn(LLAMA_WIDTH, d_model, generator=gen) / d_model ** 0.5 / scale,
               "encoder.bias": 0.1 * torch.randn(LLAMA_WIDTH, generator=gen),
               "decoder.weight": torch.randn(d_model, LLAMA_WIDTH, generator=gen) / LLAMA_WIDTH ** 0.5,
               "decoder.bias": torch.randn(d_model, generator=gen)}, str(folder / "checkpoints" / "final.safetensors"))
    norm = d_model ** 0.5 / scale
    (folder / "hyperparams.json").write_text(json.dumps({
        "d_model": d_model, "d_sae": LLAMA_WIDTH, "hook_point_in": "blocks.0.hook_resid_post",
        "hook_point_out": "blocks.0.hook_resid_post", "jump_relu_threshold": 0.02,
        "dataset_average_activation_norm": {"in": norm, "out": norm}}))
    return folder


def saelens_side(work: Path) -> None:
    """Run inside the SAELens environment: load each case by release name and write encode/forward outputs."""
    import struct

    import torch
    from sae_lens import SAE
    from sae_lens.loading import pretrained_sae_loaders
    from safetensors.torch import load_file, save_file

    def local_shapes(repo_id: str, filename: str) -> dict[str, list[int]]:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(repo_id, filename, local_files_only=True)
        with open(path, "rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
        return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}

    pretrained_sae_loaders.get_safetensors_tensor_shapes = local_shapes
    inputs = load_file(str(work / "inputs.safetensors"))
    outputs, facts = {}, {}
    for index, (release, sae_id, _) in enumerate(CASES):
        x = inputs[f"x_{index}"]
        sae = SAE.from_pretrained(release, sae_id, device="cpu")
        sae.eval()
        with torch.no_grad():
            outputs[f"encode_{index}"] = sae.encode(x).contiguous()
            outputs[f"forward_{index}"] = sae(x).contiguous()
        facts[index] = {"class": type(sae).__name__, "hook_name": sae.cfg.metadata.hook_name,
                        "hook_name_out": getattr(sae.cfg, "hook_name_out", None) or
                        getattr(sae.cfg.metadata, "hook_name_out", None),
                        "model_name": sae.cfg.metadata.model_name}
    save_file(outputs, str(work / "saelens.safetensors"))
    (work / "saelens.json").write_text(json.dumps(facts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saelens-python", help="python of a virtual environment with sae-lens installed")
    parser.add_argument("--saelens-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.saelens_side:
        saelens_side(args.saelens_side)
        return 0
    if not args.saelens_python:
        parser.error("--saelens-python is required")
    sys.path[:0] = [str(ROOT / "backend"), str(ROOT)]
    import torch
    from safetensors.torch import load_file, save_file

    from interpscope.sae import load_sae
    from interpscope.sae.releases import find, resolve
    from tests.released import gemma_scope_2_tensors, write_gemma_scope_2

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = work / "hub"
        env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", INTERPSCOPE_DATA_DIR=str(work / "data"))
        os.environ.update(HF_HUB_CACHE=env["HF_HUB_CACHE"], HF_HUB_OFFLINE="1",
                          INTERPSCOPE_DATA_DIR=env["INTERPSCOPE_DATA_DIR"])
        inputs = {}
        ours = {}
        for index, (release, sae_id, with_config) in enumerate(CASES):
            if release.startswith("llama_scope"):
                x = 3.0 * torch.randn(ROWS, LLAMA_D, generator=torch.Generator().manual_seed(index))
                folder = write_llama_scope(cache, x.shape[1])
                sae = load_sae(folder)
                with torch.no_grad():
                    ours[index] = (sae.encode(x), sae(x), sae)
                inputs[f"x_{index}"] = x
                continue
            x = 3.0 * torch.randn(ROWS, D_MODEL, generator=torch.Generator().manual_seed(index))
            inputs[f"x_{index}"] = x
            entry = find(f"{release}/{sae_id}")
            affine = entry.affine
            tensors = gemma_scope_2_tensors(D_MODEL, WIDTH, affine=affine, seed=index)
            config = None
            if with_config:
                layer = 3
                config = {"architecture": "jump_relu", "model_name": "gemma-v3-270m-pt", "affine_connection": affine,
                          "hf_hook_point_in": f"model.layers.{layer}.pre_feedforward_layernorm.output",
                          "hf_hook_point_out": f"model.layers.{layer}.post_feedforward_layernorm.output"}
            write_gemma_scope_2(cache, entry.path, tensors, config=config)
            sae = load_sae(resolve(entry.name))
            with torch.no_grad():
                ours[index] = (sae.encode(x), sae(x), sae)
        save_file(inputs, str(work / "inputs.safetensors"))
        run = subprocess.run([args.saelens_python, str(Path(__file__).resolve()), "--saelens-side", str(work)],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-4000:], file=sys.stderr)
            return 1
        theirs = load_file(str(work / "saelens.safetensors"))
        facts = json.loads((work / "saelens.json").read_text())
        rows = []
        for index, (release, sae_id, with_config) in enumerate(CASES):
            encoded, output, sae = ours[index]
            rows.append({
                "release": release, "sae_id": sae_id, "config_json": with_config,
                "interpscope": {"architecture": sae.cfg.architecture, "hook_name": sae.cfg.hook_name,
                                "hook_name_out": sae.cfg.extra.get("hook_name_out"), "model": sae.cfg.model_name},
                "saelens": facts[str(index)],
                "active_fraction": float((encoded > 0).float().mean()),
                "max_abs_diff_encode": float((encoded - theirs[f"encode_{index}"]).abs().max()),
                "max_abs_diff_forward": float((output - theirs[f"forward_{index}"]).abs().max()),
                "max_abs_forward": float(output.abs().max())})
    import importlib.metadata as metadata

    saelens_version = subprocess.run([args.saelens_python, "-c", "import sae_lens; print(sae_lens.__version__)"],
                                     capture_output=True, text=True).stdout.strip()
    document = {"command": "python bench/saelens_interop.py --saelens-python <venv with sae-lens>/bin/python",
                "sae_lens_version": saelens_version, "torch_version": metadata.version("torch"),
                "inputs": f"{ROWS} rows of 3 * N(0, 1) at d_model {D_MODEL}, width {WIDTH} (Llama Scope: d_model "
                          f"{LLAMA_D}, width {LLAMA_WIDTH}); float32",
                "offline": "HF_HUB_OFFLINE=1; SAELens's get_safetensors_tensor_shapes (an HTTP range request) read "
                           "from the cached file instead", "cases": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['release']}/{row['sae_id']}: encode {row['max_abs_diff_encode']:.3g}, forward "
              f"{row['max_abs_diff_forward']:.3g} (|y| up to {row['max_abs_forward']:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
