"""Rebuild backend/interpscope/sae/release_catalogue.json: the released dictionaries that fit the bundled models,
read from SAELens's directory of pretrained SAEs (its pretrained_saes.yaml, from an installed sae-lens).

    python scripts/make_release_catalogue.py /path/to/site-packages/sae_lens/pretrained_saes.yaml

Each entry keeps what a page lists and the loader needs: the release's repository, model and format, and per
dictionary its id, path in the repository, hook point(s) (mapped onto Interpscope's hook names), width and L0.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

from interpscope.sae.formats.gemma_scope import _INFERRED_HOOKS, hook_name, kind_of, layer_of  # noqa: E402

OUT = ROOT / "backend" / "interpscope" / "sae" / "release_catalogue.json"
RELEASES = ("gemma-scope-2-270m-pt-res", "gemma-scope-2-270m-pt-res-all", "gemma-scope-2-270m-pt-transcoders",
            "gemma-scope-2-270m-pt-transcoders-all", "gemma-scope-2-270m-pt-mlp", "gemma-scope-2-270m-pt-mlp-all",
            "gemma-scope-2-270m-pt-att", "gemma-scope-2-270m-pt-att-all")
_WIDTH = re.compile(r"width_(\d+)([km])")


def width_of(path: str) -> int:
    match = _WIDTH.search(path)
    if not match:
        raise ValueError(f"no width in {path}")
    return int(match.group(1)) * (1 << (10 if match.group(2) == "k" else 20))


def entry(sae: dict) -> dict:
    path = str(sae["path"])
    layer, kind = layer_of(path), kind_of(path)
    hf_in, hf_out = _INFERRED_HOOKS[kind]
    return {"id": str(sae["id"]), "path": path, "hook": hook_name(f"model.layers.{layer}.{hf_in}"),
            "hook_out": hook_name(f"model.layers.{layer}.{hf_out}") if hf_out else None, "width": width_of(path),
            "l0": sae.get("l0"), "affine": path.endswith("_affine")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("yaml", type=Path, help="SAELens's pretrained_saes.yaml")
    args = parser.parse_args()
    directory = yaml.safe_load(args.yaml.read_text(encoding="utf-8"))
    releases = {}
    for name in RELEASES:
        release = directory[name]
        releases[name] = {"repo_id": release["repo_id"], "model": release["model"], "format": "gemma_scope_2",
                          "saes": [entry(sae) for sae in release["saes"]]}
    document = {"source": "SAELens pretrained_saes.yaml", "rebuild": "python scripts/make_release_catalogue.py "
                "<site-packages>/sae_lens/pretrained_saes.yaml", "releases": releases}
    text = json.dumps(document, indent=1)
    for release in releases.values():  # one line per dictionary: a diff shows which ones changed
        for sae in release["saes"]:
            text = text.replace(json.dumps(sae, indent=1).replace("\n", "\n" + " " * 4), json.dumps(sae), 1)
    OUT.write_text(text + "\n", encoding="utf-8")
    print(f"{sum(len(r['saes']) for r in releases.values())} dictionaries in {len(releases)} releases -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
