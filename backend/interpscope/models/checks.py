"""Checks on a model before and right after transformers loads it, with messages meant for the person.

Before: the name is a plausible folder or Hugging Face id; the folder's weights are safetensors (pickle
checkpoints such as pytorch_model.bin can run arbitrary code when opened, so they are refused, never loaded) and
each safetensors file has an intact header that covers the whole file (a truncated download fails here, not
deep inside transformers). After: no weight holds NaN or infinity.
"""
from __future__ import annotations

from pathlib import Path

import torch

from interpscope.config import InterpscopeError

MAX_NAME_CHARS = 512  # longer than any path component allows; Hugging Face ids are at most 96 per part
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def check_model_name(name: str) -> None:
    """Refuse names no folder or Hugging Face id can have, before touching the file system."""
    if len(name) > MAX_NAME_CHARS:
        raise InterpscopeError(f"The model name is {len(name):,} characters long; give a bundled name, a local "
                               f"folder or a Hugging Face id (owner/name), at most {MAX_NAME_CHARS} characters.")
    if "\x00" in name:
        raise InterpscopeError("The model name contains a NUL character.")


def check_weight_files(folder: Path) -> None:
    """Refuse a model folder whose weights are pickles only, missing, or damaged safetensors files."""
    folder = Path(folder)
    safetensors = sorted(folder.glob("*.safetensors"))
    if not safetensors:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES and p.is_file())
        if pickles:
            raise InterpscopeError(
                f"{folder} holds only pickle weights ({', '.join(pickles[:3])}); pickles can run arbitrary code "
                "when opened, so Interpscope refuses them. Convert the model to safetensors first "
                "(model.save_pretrained(folder, safe_serialization=True) where you trust the file).")
        raise InterpscopeError(f"{folder} has no model weights (no *.safetensors file).")
    from safetensors import SafetensorError, safe_open

    for path in safetensors:
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as err:
            raise InterpscopeError(f"{path} is not a readable safetensors file ({err}); it may be truncated or "
                                   "damaged: download or save it again.") from None


def check_finite_weights(model: torch.nn.Module) -> None:
    """Refuse a model with a NaN or infinite parameter, naming the first such tensor (buffers such as attention
    masks may hold -inf on purpose)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                bad = int((~torch.isfinite(tensor)).sum())
                raise InterpscopeError(f"The model's weight {name} holds {bad} NaN or infinite values (of "
                                       f"{tensor.numel()}); the weights are broken, so the model is refused.")


def cached_hub_folder(repo_id: str) -> Path | None:
    """The local snapshot folder of a Hugging Face id already in the hub cache (None when it is not there)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        config = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - an id the hub library rejects is reported by the loader itself
        return None
    return Path(config).parent if isinstance(config, str) else None
