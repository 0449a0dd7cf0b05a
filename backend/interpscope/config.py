"""Where Interpscope keeps its caches, and which device/dtype a model runs on."""
from __future__ import annotations

import os
from pathlib import Path

import torch

DATA_DIR_ENV = "INTERPSCOPE_DATA_DIR"
ASSETS_DIR_ENV = "INTERPSCOPE_ASSETS_DIR"
# The bundled artefacts (SAEs, stores, trained models) live in the repository's assets/. An installed package (a
# wheel in site-packages) has none beside it: INTERPSCOPE_ASSETS_DIR points it at a clone's assets/ folder, whose
# parent then plays the repository's part (the shipped manifests name their SAEs relative to it).
ASSETS_DIR = (Path(os.environ[ASSETS_DIR_ENV]).expanduser().resolve() if os.environ.get(ASSETS_DIR_ENV)
              else Path(__file__).resolve().parents[2] / "assets")  # backend/interpscope/config.py
REPO_ROOT = ASSETS_DIR.parent


def artefact_hint(rebuild: str | None = None) -> str:
    """How to get a shipped artefact (an SAE, a store, transcoders, a tuned lens, the corpus, a trained model) that
    is missing, for the message that says so: in a clone, the command that rebuilds it; in an installation without
    the clone's assets/ folder (a pip-installed wheel holds none), how to point it at one."""
    if ASSETS_DIR.is_dir():
        return f"rebuild it with `{rebuild}`" if rebuild else f"it belongs in {ASSETS_DIR}"
    where = (f"{ASSETS_DIR_ENV}={os.environ[ASSETS_DIR_ENV]} names no folder" if os.environ.get(ASSETS_DIR_ENV)
             else "a pip-installed package holds no assets/ folder")
    return (f"this installation has none of Interpscope's shipped artefacts ({where}): clone the Interpscope "
            f"repository and set {ASSETS_DIR_ENV} to the clone's assets/ folder "
            f"(export {ASSETS_DIR_ENV}=/path/to/interpscope/assets)")

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


class InterpscopeError(Exception):
    """An error whose message is meant for the person using the tool (page or command line)."""


def _data_dir_setting() -> tuple[Path, str]:
    """The data directory's path and how to name it in a message; an error when that path is a file."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        path = Path(env).expanduser()
    else:
        from platformdirs import user_cache_dir

        path = Path(user_cache_dir("interpscope"))
    where = f"{DATA_DIR_ENV}={env}" if env else f"The data directory {path}"
    if path.exists() and not path.is_dir():
        raise InterpscopeError(f"{where} is a file, not a folder; point {DATA_DIR_ENV} at a folder.")
    return path, where


def check_data_dir() -> None:
    """Refuse a data directory setting that cannot work, without creating anything (run before long work)."""
    _data_dir_setting()


def data_dir() -> Path:
    """The data directory for caches and stores (created if needed): $INTERPSCOPE_DATA_DIR, else the user's cache
    dir."""
    path, where = _data_dir_setting()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InterpscopeError(f"{where}: cannot create the folder {path} ({err.strerror or err}); point "
                               f"{DATA_DIR_ENV} at a writable folder.") from None
    return path


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' picks CUDA, then Apple MPS, then CPU; an explicit device that is absent is an error."""
    device = (device or "auto").lower()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InterpscopeError("CUDA was asked for but no CUDA GPU is available here; use device 'auto' or 'cpu'.")
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise InterpscopeError("Apple MPS was asked for but is not available here; use 'auto' or 'cpu'.")
    if device not in ("cpu", "mps") and not device.startswith("cuda"):
        raise InterpscopeError(f"Unknown device {device!r}: choose auto, cpu, cuda or mps.")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype = "float32", device: torch.device | None = None) -> torch.dtype:
    """Map a dtype name to torch; half precision on CPU is allowed but slow, so 'auto' means float32 there."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = (dtype or "auto").lower()
    if name == "auto":
        if device is not None and device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if name not in DTYPES:
        raise InterpscopeError(f"Unknown dtype {dtype!r}: choose one of auto, {', '.join(DTYPES)}.")
    return DTYPES[name]
