"""What a feature store folder holds, and the small file helpers every part of the store uses.

A complete store is a folder with `manifest.json` (written last, so its presence means complete) and one `.npy`
file per array, opened as read-only memory maps: opening a feature reads a few kilobytes, never the whole file.
While building, everything lives in `<store>.partial/` (activation chunks + progress.json); the finished
arrays are written into `<store>.partial/final/`, which is renamed to `<store>` in one step.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from interpscope.config import ASSETS_DIR
from interpscope.sae.catalog import SHIPPED_DIR as SHIPPED_SAES_DIR
from interpscope.sae.folder import WEIGHTS_FILE
from interpscope.stores import MANIFEST, StoreKind, save_npy, stored_folder

FEATURE_STORES = StoreKind(name="feature store", shipped=ASSETS_DIR / "sae_stores", local=("sae_stores",),
                           build_hint="build it with `interpscope sae store --sae DIR`", format_version=1)
WEIGHTS_HASH = "sae_weights_sha256"  # manifest key: sha256 of the SAE's weights file, what ties a store to its SAE

# One row per feature unless noted. K = top contexts, I x P = interval samples, W = window half-widths.
ARRAYS = (
    "tokens",            # [n_seqs, context] int32: the corpus the store was built over
    "fire_count",        # int64: tokens where the feature is > 0 (position 0 of each window excluded)
    "max_act", "mean_act",  # float32: max and mean of the nonzero activations
    "top_loc",           # [K, 2] int32: (sequence, position), -1 where the feature fired fewer than K times
    "top_act",           # [K] float32
    "top_window",        # [K, 2 * W_top + 1] float16: the feature's activation on every token around it
    "int_loc", "int_act", "int_window",  # [I, P, 2], [I, P], [I, P, 2 * W_int + 1]: interval samples
    "hist_counts",       # [B]: histogram of nonzero activations, B equal bins from 0 to max_act
    "logit_top_ids", "logit_top_vals", "logit_bottom_ids", "logit_bottom_vals",  # [10] each
    "logit_hist_counts", "logit_range",   # [B], [2]: histogram of all vocab logit weights, B bins from min to max
    "neighbour_ids", "neighbour_cos",     # [N]: nearest features by decoder cosine
)
STORE_FILES = tuple(f"{name}.npy" for name in ARRAYS) + ("vocab.json", "labels.json", "explanations.jsonl",
                                                          MANIFEST)  # all a store writes (explanations: sae explain)


@dataclass
class StoreSpec:
    """Everything that determines a store's contents; a partial build resumes only under an identical spec."""

    sae_path: str
    sae_digest: str
    model_name: str
    hook_name: str
    d_sae: int
    corpus: str = "austen"
    split: str = "train"
    n_tokens: int = 65536
    context_size: int = 128
    batch_size: int = 8
    top_k: int = 20
    window_top: int = 10
    n_intervals: int = 10
    per_interval: int = 4
    window_interval: int = 5
    hist_bins: int = 32
    n_logits: int = 10
    n_neighbours: int = 10
    seed: int = 0
    activations: str = "model"  # "model": run up to the hook; "cache": an SAE-training activation cache

    def to_dict(self) -> dict:
        return asdict(self)


def folder_of(stored: str) -> Path:
    """The SAE folder a manifest names (its portable_path); on a shared server only inside the allowed folders."""
    return stored_folder(stored, "SAE folder named in the store's manifest")


def sae_digest(folder: Path) -> str:
    """A short hash of the SAE's weights and config (a store is only valid for exactly that SAE)."""
    digest = hashlib.sha1()
    for name in ("cfg.json", "sae_weights.safetensors"):
        with open(Path(folder) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def weights_sha256(folder: str | Path) -> str:
    """sha256 of the SAE folder's weights file: the same weights give the same hash wherever the folder lives."""
    digest = hashlib.sha256()
    with open(Path(folder) / WEIGHTS_FILE, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_array_atomic(path: Path, array: np.ndarray) -> None:
    """One store array, C-ordered, written atomically."""
    save_npy(path, np.ascontiguousarray(array))


def default_store_dir(sae_folder: str | Path) -> Path:
    """Where a store for this SAE lives by default: the shipped store for a shipped SAE folder (that folder itself,
    not another one with the same name), else a folder in the data dir keyed by the SAE folder's path."""
    folder = Path(sae_folder).expanduser().resolve()
    shipped = FEATURE_STORES.shipped / folder.name
    if folder == (SHIPPED_SAES_DIR / folder.name).resolve() and (shipped / MANIFEST).is_file():
        return shipped
    key = hashlib.sha1(str(folder).encode()).hexdigest()[:10]
    return FEATURE_STORES.local_root() / f"{folder.name}-{key}"


def list_stores() -> list[Path]:
    """Complete feature stores: the shipped ones, then those built into the data directory."""
    return FEATURE_STORES.listed()
