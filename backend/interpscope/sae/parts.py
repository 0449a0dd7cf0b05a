"""An SAE from a cfg.json's content and its tensors: what load_sae does once it has read a folder, and what a released
format's reader (interpscope.sae.formats) does with its own files. Here, not in interpscope.sae.folder, so that the
readers and load_sae (which asks the readers about a folder it cannot read itself) do not import each other."""
from __future__ import annotations

from pathlib import Path

import torch

from interpscope.config import DTYPES, InterpscopeError
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.cfg_json import read_config

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
PICKLE_SUFFIXES = (".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".bin")
SCALING_TENSORS = ("scaling_factor", "finetuning_scaling_factor")


def apply_scaling_factor(raw: dict, tensors: dict[str, torch.Tensor], d_sae: int) -> dict[str, torch.Tensor]:
    """Fold a stored decoder scaling (see the module docstring) into W_dec, or refuse it by name."""
    tensors = dict(tensors)
    for name in SCALING_TENSORS:
        if name not in tensors:
            continue
        factor = tensors.pop(name)
        if tuple(factor.shape) != (d_sae,):
            raise InterpscopeError(f"{WEIGHTS_FILE} holds {name} of shape {tuple(factor.shape)}; a decoder scaling "
                                   f"needs one number per feature ({d_sae}).")
        if torch.allclose(factor.double(), torch.ones(d_sae, dtype=torch.float64)):
            continue
        if raw.get("finetuning_scaling_factor") is not True:
            raise InterpscopeError(f"{WEIGHTS_FILE} holds {name} (not all ones), but cfg.json field "
                                   "finetuning_scaling_factor is not true, so its meaning is unknown; the common "
                                   "SAE library refuses such a folder too.")
        if "W_dec" in tensors:
            dtype = tensors["W_dec"].dtype
            tensors["W_dec"] = (tensors["W_dec"].double() * factor.double()[:, None]).to(dtype)
    return tensors


def sae_from_parts(raw: dict, tensors: dict[str, torch.Tensor], folder: Path | str,
                   dtype: str | torch.dtype | None = "float32", weights_file: str = WEIGHTS_FILE) -> SparseAutoencoder:
    """An SAE from a cfg.json's content and its tensors in the common library's names (what a folder holds, or what
    a released format's reader (interpscope.sae.formats) made of its files); every check of load_sae applies."""
    cls, cfg = read_config(raw)
    for name, tensor in tensors.items():
        check_finite(tensor, name, Path(folder) / weights_file)
    if "W_enc" not in tensors:
        raise InterpscopeError(f"{weights_file} lacks W_enc (it has {', '.join(sorted(tensors)) or 'nothing'}).")
    stored = tensors["W_enc"].dtype
    target = stored if dtype is None else DTYPES[dtype] if isinstance(dtype, str) else dtype
    expected = cls.tensor_shapes(cfg)
    tensors = {name: tensor.to(target) for name, tensor in tensors.items()}
    try:
        tensors = cls.prepare_tensors(raw, apply_scaling_factor(raw, tensors, cfg.d_sae))
    except (KeyError, IndexError, RuntimeError):
        pass  # a tensor it needs is missing or misshapen: named just below
    except ValueError as err:
        raise InterpscopeError(f"{folder}: {err}") from None
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise InterpscopeError(f"{weights_file} lacks {', '.join(missing)} needed by a {cls.label} SAE "
                               f"(it has {', '.join(sorted(tensors))}).")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise InterpscopeError(
                f"{name} has shape {tuple(tensors[name].shape)} but cfg.json (d_in={cfg.d_in}, "
                f"d_sae={cfg.d_sae}) implies {shape}.")
    unused = sorted(set(tensors) - set(expected))
    if unused:
        raise InterpscopeError(f"{weights_file} holds {', '.join(unused)}, which a {cls.label} SAE does not use; "
                               "Interpscope refuses to drop weights silently (remove them if they mean nothing).")
    sae = cls(cfg, dtype=target, seed=None)
    with torch.no_grad():
        for name in expected:
            getattr(sae, name).copy_(tensors[name])
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
