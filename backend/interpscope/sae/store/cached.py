"""Reuse an SAE-training activation cache for a store's first pass (no model forward at all).

The SAE trainer caches the hook activations of the corpus windows (positions 1.. of each window, float16) in
data_dir()/activations/. When a complete cache was made for the same model, hook, corpus, split and window size
and holds at least the store's windows, the store encodes those rows instead of running the model: same windows
(the corpus is cut the same way), inputs rounded to float16. Before trusting a cache, one window is recomputed
live and compared; a mismatch means the cache is not used.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import data_dir
from interpscope.sae.store.encode import hook_activations

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

TOLERANCE = 2e-2  # relative, float16 storage of activations whose norm is in the tens


def find_cache(lm: LoadedModel, hook_name: str, corpus: str, split: str, context_size: int, n_windows: int,
               first_window: torch.Tensor) -> np.ndarray | None:
    """A read-only [n_rows, d] memmap of a matching cache whose rows cover n_windows windows, or None."""
    root = data_dir() / "activations"
    if not root.is_dir():
        return None
    needed = n_windows * (context_size - 1)
    for meta_file in sorted(root.glob("*/meta.json")):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            spec = meta["spec"]
        except (OSError, ValueError, KeyError):
            continue
        wanted = {"model_name": lm.name, "hook_name": hook_name, "source": corpus, "split": split,
                  "context_size": context_size}
        if any(spec.get(k) != v for k, v in wanted.items()) or int(meta.get("n_rows", 0)) < needed:
            continue
        dtype = {"float16": np.float16, "float32": np.float32}.get(spec.get("dtype"))
        if dtype is None or spec.get("d_in") != lm.adapter.d_model:
            continue
        rows = np.memmap(Path(meta_file.parent) / "acts.bin", dtype=dtype, mode="r",
                         shape=(int(meta["n_rows"]), int(spec["d_in"])))
        if _matches(lm, hook_name, rows, first_window):
            return rows
    return None


def _matches(lm: LoadedModel, hook_name: str, rows: np.ndarray, window: torch.Tensor) -> bool:
    with model_lock(lm):
        live = hook_activations(lm, hook_name, window[None])[0, 1:].float().cpu()
    cached = torch.from_numpy(np.array(rows[: live.shape[0]], dtype=np.float32))
    return bool((cached - live).norm() <= TOLERANCE * live.norm())


def cached_batch(rows: np.ndarray, first: int, count: int, context_size: int) -> torch.Tensor:
    """Activations [count, context_size, d] of windows first..first+count-1 (position 0 left at zero)."""
    per = context_size - 1
    block = np.array(rows[first * per:(first + count) * per], dtype=np.float32).reshape(count, per, -1)
    out = torch.zeros(count, context_size, block.shape[-1])
    out[:, 1:] = torch.from_numpy(block)
    return out
