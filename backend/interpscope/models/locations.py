"""Where a model name points and how transformers is reached: the pieces that both loading a model
(interpscope.models.loading) and estimating one without loading it (interpscope.models.memory) need, here so that
neither imports the other."""
from __future__ import annotations

import os
import socket
import threading
from functools import lru_cache
from pathlib import Path

from interpscope.config import InterpscopeError
from interpscope.models.checks import check_model_name
from interpscope.models.registry import BUNDLED
from interpscope.paths import confined, confined_folder, display_path, from_display, looks_like_path, server_mode


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether huggingface.co answers quickly; False when HF_HUB_OFFLINE is set."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=1.5):
            return True
    except OSError:
        return False


_IMPORT_LOCK = threading.Lock()


def _auto_classes():
    """transformers' Auto classes, imported by one thread at a time: transformers is a lazy module, and two sessions
    importing it at once (a page's first load racing a rerun) saw a half-initialised module ("cannot import name
    'AutoConfig'")."""
    with _IMPORT_LOCK:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    return AutoConfig, AutoModelForCausalLM, AutoTokenizer, hf_logging



def _resolve_location(name: str) -> tuple[str, str, bool]:
    """(location for from_pretrained, source label, local_files_only)."""
    check_model_name(name)
    if name in BUNDLED:
        return str(BUNDLED[name].folder()), "bundled", True
    name = from_display(name)  # a folder model's shown name ('[data dir]/models/x') loads that folder
    path = Path(name).expanduser()
    try:
        exists = path.exists()
    except OSError as err:
        if server_mode():
            confined(name, "model folder")
        raise InterpscopeError(f"No model folder at {name[:80]!r}: {err.strerror or err}.") from None
    if server_mode() and (exists or looks_like_path(name)):
        # every folder a shared server loads, typed or named in a file (an SAE's cfg.json), and each file in it
        path = confined_folder(path, "model folder")
    if exists:
        if not (path / "config.json").is_file():
            raise InterpscopeError(f"{display_path(path)} is not a Hugging Face model folder (no config.json in "
                                   "it).")
        return str(path.resolve()), "local", True
    if name.count("/") > 1 or name.startswith((".", "/", "~")) or not name.strip():
        raise InterpscopeError(f"No model folder at {name!r}.")
    return name, "huggingface", server_mode() or not hub_reachable()  # a shared server downloads nothing
