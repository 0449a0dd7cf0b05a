"""The common SAE folder format: `cfg.json` + `sae_weights.safetensors`, as the SAELens library writes it.

cfg.json is read and written by interpscope.sae.cfg_json (every layout of that library; each architecture reads and
writes its own fields). Tensor names: W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_dec, and the per-feature
tensors each architecture declares. A tensor the architecture does not use is refused by name, except the
decoder scaling the library once stored (`scaling_factor` / `finetuning_scaling_factor`): all ones means nothing;
otherwise, with cfg.json's finetuning_scaling_factor true, it multiplies the features before the decoder, as that
library's releases before 6.0 did, so it is folded into W_dec's rows (without the flag that library refuses the
folder, and so do we). Pickle checkpoints (.pt/.pth/.ckpt/.pkl/.bin) are refused: opening one can run
arbitrary code.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from interpscope import atomic
from interpscope.config import DTYPES, InterpscopeError
from interpscope.models.registry import model_choice
from interpscope.paths import confined_folder, server_mode
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.cfg_json import config_to_json, read_config
from interpscope.sae.parts import (  # noqa: F401  (this module's names, as before)
    CFG_FILE,
    PICKLE_SUFFIXES,
    SCALING_TENSORS,
    WEIGHTS_FILE,
    apply_scaling_factor,
    check_finite,
    sae_from_parts,
)


def _refuse_pickle(path: Path) -> None:
    raise InterpscopeError(
        f"{path.name} is a pickle checkpoint; pickles can run arbitrary code when opened, so Interpscope "
        f"refuses them. Convert it to an SAE folder (cfg.json + {WEIGHTS_FILE}) with safetensors first.")


def save_sae(sae: SparseAutoencoder, folder: str | Path, dtype: str | None = None) -> Path:
    """Write cfg.json + sae_weights.safetensors (in `dtype`, default the SAE's cfg.dtype); files replaced atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or sae.cfg.dtype
    if dtype not in DTYPES:
        raise InterpscopeError(f"Unknown dtype {dtype!r} for saving an SAE.")
    sae.cfg.dtype = dtype
    tensors = {name: tensor.detach().to(DTYPES[dtype]).contiguous().cpu()
               for name, tensor in sae.folder_tensors().items()}
    atomic.write_bytes(folder / WEIGHTS_FILE, save(tensors, metadata={"format": "pt"}))
    atomic.write_json(folder / CFG_FILE, config_to_json(sae.cfg))
    return folder


def load_sae(path: str | Path, dtype: str | torch.dtype | None = "float32") -> SparseAutoencoder:
    """Open an SAE folder (or its cfg.json / weights file). dtype None keeps the stored precision exactly."""
    path = Path(path).expanduser()
    if path.suffix.lower() in PICKLE_SUFFIXES and path.exists():
        _refuse_pickle(path)
    folder = path.parent if path.is_file() else path
    if server_mode():  # the folder and each file in it inside the allowed folders, symlinks followed
        folder = confined_folder(folder, "SAE folder")
    if not folder.is_dir():
        raise InterpscopeError(f"No SAE folder at {path}.")
    if not (folder / CFG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        pickles = [p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
        if pickles:
            _refuse_pickle(pickles[0])
        from interpscope.sae.formats import detect_format

        released = detect_format(folder)
        if released is not None:  # a released dictionary's own layout (Gemma Scope, Llama Scope, ...)
            return released.load(folder, dtype=dtype)
        raise InterpscopeError(f"{folder} is not an SAE folder: it needs {CFG_FILE} and {WEIGHTS_FILE} (or the "
                               "files of a released format Interpscope reads: see interpscope.sae.formats).")
    try:
        raw = json.loads((folder / CFG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{folder / CFG_FILE} is not valid JSON ({err}).") from None
    if not isinstance(raw, dict):
        raise InterpscopeError(f"{folder / CFG_FILE} must hold a JSON object.")
    read_config(raw)  # a cfg.json Interpscope cannot read is refused before the weights are opened
    try:
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError) as err:
        raise InterpscopeError(f"{folder / WEIGHTS_FILE} is not a readable safetensors file ({err}).") from None
    return sae_from_parts(raw, tensors, folder, dtype)


def sae_model_name(sae: SparseAutoencoder, default: str = "smollm2-135m") -> str:
    """The model an SAE reads: its cfg.json's model_name (or default). A name read from a file is checked like one
    typed into the sidebar: on a shared server a folder must lie inside the allowed folders and a Hugging Face id
    must already be cached."""
    return model_choice(sae.cfg.model_name or default, "model folder named in the SAE's cfg.json (model_name)")


def hook_width(adapter, hook_name: str) -> int:
    """The size of the activation at hook_name (d_mlp for MLP neurons, the heads' total width at attn.hook_z, else
    d_model)."""
    spec = adapter.resolve(hook_name)
    if hook_name.endswith("attn.hook_z"):  # nn.Linear's in_features, or a GPT-2 Conv1D's nx
        module = spec.module
        return int(getattr(module, "in_features", None) or getattr(module, "nx", None) or adapter.d_model)
    return adapter.d_mlp if hook_name.endswith("mlp.hook_post") else adapter.d_model


def check_compatible(sae: SparseAutoencoder, adapter, hook_name: str | None = None,
                     model_name: str | None = None) -> str:
    """Raise a clear error unless the SAE fits this model's activation at its hook; returns the hook name."""
    hook = hook_name or sae.cfg.hook_name
    if not hook:
        raise InterpscopeError("The SAE's cfg.json names no hook_name; say which hook point it reads.")
    try:
        width = hook_width(adapter, hook)
    except InterpscopeError as err:
        raise InterpscopeError(f"The SAE reads {hook!r}, which this model lacks: {err}") from None
    if sae.cfg.d_in != width:
        trained_on = f" (trained on {sae.cfg.model_name})" if sae.cfg.model_name else ""
        shown = f" {model_name}" if model_name else ""
        raise InterpscopeError(
            f"Shape mismatch: the SAE{trained_on} expects d_in={sae.cfg.d_in} at {hook}, but the model{shown} has "
            f"{width} there. Pick the model the SAE was trained on or an SAE for this model.")
    return hook


__all__ = ["save_sae", "load_sae", "sae_from_parts", "check_compatible", "check_finite", "hook_width", "sae_model_name"]
