"""Released dictionaries synthesised in their publishers' exact layouts, inside a Hugging Face cache folder
(models--ORG--NAME/refs/main + snapshots/<rev>/<path>/...), for tests and for bench/saelens_interop.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

REVISION = "0123456789abcdef0123456789abcdef01234567"


def snapshot(cache: Path, repo_id: str, revision: str = REVISION) -> Path:
    """The snapshot folder of repo_id in a Hugging Face cache (created, with refs/main pointing at it)."""
    org, name = repo_id.split("/")
    repo = Path(cache) / f"models--{org}--{name}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    folder = repo / "snapshots" / revision
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def gemma_scope_2_tensors(d_in: int, d_sae: int, d_out: int | None = None, affine: bool = False,
                          seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under Gemma Scope 2's names (thresholds positive, some features firing)."""
    gen = torch.Generator().manual_seed(seed)
    d_out = d_in if d_out is None else d_out
    tensors = {"w_enc": torch.randn(d_in, d_sae, generator=gen) / d_in ** 0.5,
               "w_dec": torch.randn(d_sae, d_out, generator=gen) / d_sae ** 0.5,
               "b_enc": 0.1 * torch.randn(d_sae, generator=gen),
               "b_dec": 0.1 * torch.randn(d_out, generator=gen),
               "threshold": 0.3 * torch.rand(d_sae, generator=gen)}
    if affine:
        tensors["affine_skip_connection"] = 0.2 * torch.randn(d_in, d_out, generator=gen)
    return tensors


def write_gemma_scope_2(cache: Path, path: str, tensors: dict[str, torch.Tensor],
                        repo_id: str = "google/gemma-scope-2-270m-pt", config: dict | None = None) -> Path:
    """One Gemma Scope 2 folder (params.safetensors, and config.json when given) at `path` in repo_id's snapshot."""
    folder = snapshot(cache, repo_id) / path
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "params.safetensors"))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_gemma_scope_1(cache: Path, path: str, tensors: dict[str, np.ndarray],
                        repo_id: str = "google/gemma-scope-2b-pt-res") -> Path:
    folder = snapshot(cache, repo_id) / path
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "params.npz", **tensors)
    return folder


def identity_tensors(d: int) -> dict[str, torch.Tensor]:
    """An identity-like JumpReLU SAE in Gemma Scope 2's names: features relu(x_i) and relu(-x_i), thresholds 0, so
    x_hat = relu(x) - relu(-x) = x exactly."""
    eye = torch.eye(d)
    return {"w_enc": torch.cat([eye, -eye], dim=1), "w_dec": torch.cat([eye, -eye], dim=0),
            "b_enc": torch.zeros(2 * d), "b_dec": torch.zeros(d), "threshold": torch.zeros(2 * d)}
