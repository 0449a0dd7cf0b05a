"""Where SAE folders live: shipped ones in assets/saes/, trained ones in data_dir()/saes/."""
from __future__ import annotations

import json
from pathlib import Path

from interpscope.config import ASSETS_DIR, InterpscopeError, data_dir
from interpscope.paths import confined_folder, folder_allowed, server_mode
from interpscope.sae.cfg_json import folder_class
from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE
from interpscope.sae.releases import RELEASES_DIR

SHIPPED_DIR = ASSETS_DIR / "saes"


def trained_dir() -> Path:
    """Default output folder of SAE training runs started from the app."""
    path = data_dir() / "saes"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _is_sae_folder(path: Path) -> bool:
    """A complete SAE folder the server may read (on a shared server none of its files leads outside the roots)."""
    return (path / CFG_FILE).is_file() and (path / WEIGHTS_FILE).is_file() and folder_allowed(path)


def list_saes() -> dict[str, Path]:
    """Label -> folder for every complete SAE folder shipped, trained (runs one level deeper) or read from a release
    here."""
    found: dict[str, Path] = {}
    if SHIPPED_DIR.is_dir():
        for folder in sorted(SHIPPED_DIR.iterdir()):
            if _is_sae_folder(folder):
                found[f"shipped: {folder.name}"] = folder
    root = data_dir() / "saes"
    if root.is_dir():
        for folder in sorted(root.glob("*/*")):
            if folder.parent.name != "checkpoints" and _is_sae_folder(folder):
                found[f"trained: {folder.parent.name}/{folder.name}"] = folder
    released = data_dir() / RELEASES_DIR  # released dictionaries read so far (interpscope.sae.releases)
    if released.is_dir():
        for folder in sorted(released.glob("*/*")):
            if _is_sae_folder(folder):
                kind = "imported" if folder.parent.name == "folders" else "release"
                name = folder.name if kind == "imported" else f"{folder.parent.name}/{folder.name.replace('__', '/')}"
                found[f"{kind}: {name}"] = folder
    return found


def describe(folder: Path) -> dict:
    """The cfg.json facts a page shows next to an SAE (the architecture as registered, e.g. BatchTopK saved as a
    JumpReLU reads 'batchtopk')."""
    if server_mode():  # the folder and each file in it inside the allowed folders, symlinks followed
        confined_folder(folder, "SAE folder")
    raw = json.loads((Path(folder) / CFG_FILE).read_text(encoding="utf-8"))
    meta = raw.get("metadata") or {}
    try:
        cls = folder_class(raw)
        architecture, label = cls.architecture, cls.label
    except InterpscopeError:
        architecture = label = str(raw.get("architecture"))
    return {"architecture": architecture, "label": label, "d_in": raw.get("d_in"), "d_sae": raw.get("d_sae"),
            "model_name": raw.get("model_name") or meta.get("model_name"),
            "hook_name": raw.get("hook_name") or meta.get("hook_name"),
            "training_tokens": raw.get("training_tokens") or meta.get("training_tokens"), "dtype": raw.get("dtype")}
