"""The common SAE folder format: `cfg.json` + `sae_weights.safetensors`, as the SAELens library writes it.

cfg.json carries d_in, d_sae, architecture, dtype, apply_b_dec_to_input, normalize_activations, and where the
SAE reads: model_name, hook_name, hook_layer, context_size, ... both at the top level (older releases) and in a
`metadata` object (newer releases); we read either and write both. Tensor names: W_enc [d_in, d_sae],
W_dec [d_sae, d_in], b_dec, and b_enc / threshold / b_gate, r_mag, b_mag by architecture.
Pickle checkpoints (.pt/.pth/.ckpt/.pkl/.bin) are refused: opening one can run arbitrary code.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from backend.config import DTYPES, InterpscopeError
from backend.sae.architectures import CLASSES, SAEConfig, SparseAutoencoder, build_sae, canonical_architecture

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
PICKLE_SUFFIXES = (".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".bin")
_LAYER = re.compile(r"^blocks\.(\d+)\.")

_CFG_FIELDS = ("model_name", "hook_name", "hook_layer", "context_size", "dataset_path", "prepend_bos",
               "training_tokens")


def _refuse_pickle(path: Path) -> None:
    raise InterpscopeError(
        f"{path.name} is a pickle checkpoint; pickles can run arbitrary code when opened, so Interpscope "
        f"refuses them. Convert it to an SAE folder (cfg.json + {WEIGHTS_FILE}) with safetensors first.")


def parameter_shapes(cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
    """The tensors (and shapes) a folder of this architecture must hold."""
    shapes: dict[str, tuple[int, ...]] = {"W_enc": (cfg.d_in, cfg.d_sae), "W_dec": (cfg.d_sae, cfg.d_in),
                                          "b_dec": (cfg.d_in,)}
    per_feature = {"standard": ("b_enc",), "topk": ("b_enc",), "jumprelu": ("b_enc", "threshold"),
                   "gated": ("b_gate", "r_mag", "b_mag")}[cfg.architecture]
    shapes.update({name: (cfg.d_sae,) for name in per_feature})
    return shapes


def config_to_json(cfg: SAEConfig) -> dict:
    """cfg.json content with the common library's field names (top level and `metadata`)."""
    top = {
        "architecture": cfg.architecture, "d_in": cfg.d_in, "d_sae": cfg.d_sae, "dtype": cfg.dtype,
        "device": "cpu", "apply_b_dec_to_input": cfg.apply_b_dec_to_input,
        "normalize_activations": cfg.normalize_activations, "reshape_activations": "none",
        "activation_fn_str": "topk" if cfg.architecture == "topk" else "relu",
        "activation_fn_kwargs": {"k": cfg.k} if cfg.architecture == "topk" else {},
        "finetuning_scaling_factor": False, "hook_head_index": None,
    }
    if cfg.architecture == "topk":
        top["k"] = cfg.k
    meta = {name: getattr(cfg, name) for name in _CFG_FIELDS}
    top.update(meta)
    top["metadata"] = dict(meta, hook_head_index=None, interpscope=cfg.extra)
    return top


def config_from_json(raw: dict) -> SAEConfig:
    """Read a cfg.json written by us or by the common library (either generation of its layout)."""
    meta = raw.get("metadata") or {}

    def pick(name, default=None):
        value = raw.get(name)
        return meta.get(name, default) if value is None else value

    for required in ("d_in", "d_sae"):
        if not isinstance(raw.get(required), int) or raw[required] < 1:
            raise InterpscopeError(f"cfg.json has no positive integer {required!r}.")
    architecture = raw.get("architecture")
    if not architecture:
        architecture = "topk" if raw.get("activation_fn_str") == "topk" else "standard"
    try:
        architecture = canonical_architecture(architecture)
    except ValueError as err:
        raise InterpscopeError(str(err)) from None
    k = raw.get("k") or (raw.get("activation_fn_kwargs") or {}).get("k")
    hook_name = str(pick("hook_name", "") or "")
    hook_layer = pick("hook_layer")
    if hook_layer is None:
        match = _LAYER.match(hook_name)
        hook_layer = int(match.group(1)) if match else -1
    normalize = str(raw.get("normalize_activations") or "none")
    if normalize not in ("none", "None"):
        raise InterpscopeError(
            f"This SAE expects activations normalised with {normalize!r}, whose scale is not stored in the "
            "folder; only normalize_activations 'none' is supported (fold the scale into the weights first).")
    return SAEConfig(
        d_in=int(raw["d_in"]), d_sae=int(raw["d_sae"]), architecture=architecture,
        model_name=str(pick("model_name", "") or ""), hook_name=hook_name, hook_layer=int(hook_layer),
        dtype=str(raw.get("dtype") or "float32"), k=int(k) if k else None,
        context_size=int(pick("context_size", 128) or 128), dataset_path=str(pick("dataset_path", "") or ""),
        apply_b_dec_to_input=bool(raw.get("apply_b_dec_to_input", True)), normalize_activations="none",
        prepend_bos=bool(pick("prepend_bos", False)), training_tokens=int(pick("training_tokens", 0) or 0),
        extra=dict(meta.get("interpscope") or {}),
    )


def save_sae(sae: SparseAutoencoder, folder: str | Path, dtype: str | None = None) -> Path:
    """Write cfg.json + sae_weights.safetensors (in `dtype`, default the SAE's cfg.dtype); files replaced atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or sae.cfg.dtype
    if dtype not in DTYPES:
        raise InterpscopeError(f"Unknown dtype {dtype!r} for saving an SAE.")
    sae.cfg.dtype = dtype
    tensors = {name: param.detach().to(DTYPES[dtype]).contiguous().cpu()
               for name, param in sae.named_parameters()}
    tmp_weights = folder / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp_weights), metadata={"format": "pt"})
    os.replace(tmp_weights, folder / WEIGHTS_FILE)
    tmp_cfg = folder / (CFG_FILE + ".tmp")
    tmp_cfg.write_text(json.dumps(config_to_json(sae.cfg), indent=2), encoding="utf-8")
    os.replace(tmp_cfg, folder / CFG_FILE)
    return folder


def load_sae(path: str | Path, dtype: str | torch.dtype | None = "float32") -> SparseAutoencoder:
    """Open an SAE folder (or its cfg.json / weights file). dtype None keeps the stored precision exactly."""
    path = Path(path).expanduser()
    if path.suffix.lower() in PICKLE_SUFFIXES and path.exists():
        _refuse_pickle(path)
    folder = path.parent if path.is_file() else path
    if not folder.is_dir():
        raise InterpscopeError(f"No SAE folder at {path}.")
    if not (folder / CFG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        pickles = [p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
        if pickles:
            _refuse_pickle(pickles[0])
        raise InterpscopeError(f"{folder} is not an SAE folder: it needs {CFG_FILE} and {WEIGHTS_FILE}.")
    try:
        raw = json.loads((folder / CFG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{folder / CFG_FILE} is not valid JSON ({err}).") from None
    if not isinstance(raw, dict):
        raise InterpscopeError(f"{folder / CFG_FILE} must hold a JSON object.")
    cfg = config_from_json(raw)
    try:
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError) as err:
        raise InterpscopeError(f"{folder / WEIGHTS_FILE} is not a readable safetensors file ({err}).") from None
    expected = parameter_shapes(cfg)
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise InterpscopeError(f"{WEIGHTS_FILE} lacks {', '.join(missing)} needed by a {cfg.architecture} SAE "
                               f"(it has {', '.join(sorted(tensors))}).")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise InterpscopeError(
                f"{name} has shape {tuple(tensors[name].shape)} but cfg.json (d_in={cfg.d_in}, "
                f"d_sae={cfg.d_sae}) implies {shape}.")
    for name in expected:
        check_finite(tensors[name], name, folder / WEIGHTS_FILE)
    stored = tensors["W_enc"].dtype
    target = stored if dtype is None else DTYPES[dtype] if isinstance(dtype, str) else dtype
    sae = build_sae(cfg, dtype=target, seed=None)
    with torch.no_grad():
        for name in expected:
            getattr(sae, name).copy_(tensors[name].to(target))
    cfg.dtype = {v: k for k, v in DTYPES.items()}.get(stored, cfg.dtype)
    return sae


def check_finite(tensor: torch.Tensor, name: str, where: Path | str) -> None:
    """Refuse NaN or infinite weights: they turn every metric into NaN and every feature card into noise."""
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = tensor[~torch.isfinite(tensor)]
        kinds = " and ".join(k for k, n in (("NaN", int(bad.isnan().sum())), ("infinite", int(bad.isinf().sum())))
                             if n)
        raise InterpscopeError(f"{where}: {name} holds {kinds} values ({bad.numel()} of {tensor.numel()}); the "
                               "weights are broken (diverged training or a damaged file), so they are refused.")


def hook_width(adapter, hook_name: str) -> int:
    """The size of the activation at hook_name (d_mlp for MLP neurons, else d_model)."""
    adapter.resolve(hook_name)
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


__all__ = ["save_sae", "load_sae", "check_compatible", "config_from_json", "config_to_json", "parameter_shapes",
           "CLASSES"]
