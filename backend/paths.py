"""Paths and names typed into a page: server mode confines paths to a few folders; names are always plain.

On a shared server (INTERPSCOPE_SERVER_MODE=1) a page must not become a way to read, or probe, the server's
file system: a typed path is resolved (home, symlinks, '..') and refused unless it lies inside an allowed root,
with one message whether or not it exists. Run and store names become folder names, so they are plain names.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from backend.config import ASSETS_DIR, InterpscopeError, data_dir

SERVER_MODE_ENV = "INTERPSCOPE_SERVER_MODE"
ALLOWED_ROOTS_ENV = "INTERPSCOPE_ALLOWED_ROOTS"
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


class Root(NamedTuple):
    """An allowed folder and the role a message names it by (never its absolute path)."""

    role: str
    path: Path


def server_mode() -> bool:
    """True when the app serves people who must not reach the server's files (INTERPSCOPE_SERVER_MODE=1)."""
    return os.environ.get(SERVER_MODE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home).expanduser() / "hub"


def allowed_roots() -> list[Root]:
    """Folders a typed path may point into in server mode (resolved; roots listed by the operator last)."""
    roots = [Root("the data directory", data_dir()), Root("the bundled assets", ASSETS_DIR),
             Root("the Hugging Face cache", hf_hub_cache())]
    extra = [part for part in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep) if part.strip()]
    roots += [Root(f"the folders in {ALLOWED_ROOTS_ENV}", Path(part.strip()).expanduser()) for part in extra]
    return [Root(role, path.resolve()) for role, path in roots]


def _refusal(what: str) -> InterpscopeError:
    roles = list(dict.fromkeys(root.role for root in allowed_roots()))
    return InterpscopeError(f"Paths typed into this shared server must lie inside its allowed folders "
                            f"({', '.join(roles)}); this {what} does not. Pick one from the lists, or ask the "
                            "server's operator to allow its folder.")


def user_path(text: str, what: str = "path") -> Path:
    """The absolute, symlink-free path a person typed; in server mode only inside allowed_roots(), refusing
    everything else with one message that does not depend on whether the path exists."""
    text = (text or "").strip()
    if not text:
        raise InterpscopeError(f"Give a {what}.")
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as err:
        if server_mode():
            raise _refusal(what) from None
        raise InterpscopeError(f"{text!r} is not a usable {what}: {err}") from None
    if server_mode() and not any(resolved.is_relative_to(root.path) for root in allowed_roots()):
        raise _refusal(what)
    return resolved


def plain_name(text: str, what: str = "name") -> str:
    """A name that can only ever be one folder: 1-64 letters, digits, '.', '-', '_', not starting with '.'."""
    name = (text or "").strip()
    if not PLAIN_NAME.fullmatch(name):
        raise InterpscopeError(f"The {what} must be a plain name: 1 to 64 letters, digits, '.', '-' or '_', not "
                               f"starting with '.' (so no '/', no '..'); {name[:80]!r} is not.")
    return name


def looks_like_path(text: str) -> bool:
    """Whether typed model text is meant as a folder rather than a Hugging Face id (decided by its shape
    alone, so the answer says nothing about the file system)."""
    text = text.strip()
    return (text.startswith(("/", "~", ".")) or "\\" in text or text.count("/") > 1
            or not HUB_ID.fullmatch(text) or any(part in (".", "..") for part in text.split("/")))


def hub_cached(repo_id: str) -> bool:
    """Whether a Hugging Face model id has a snapshot with a config.json in the local hub cache."""
    if not HUB_ID.fullmatch(repo_id):
        return False
    repo = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    return any(repo.glob("snapshots/*/config.json"))


def model_choice(text: str) -> str:
    """Check a model name typed into the sidebar and return what to load: folders go through user_path; in
    server mode a Hugging Face id must already be in the local hub cache (nothing is downloaded for a visitor).
    Bundled names pass as they are."""
    from backend.models.registry import BUNDLED

    name = (text or "").strip()
    if name in BUNDLED:
        return name
    if looks_like_path(name) or (not server_mode() and Path(name).expanduser().exists()):
        user_path(name, "model folder")
        return name
    if server_mode() and not hub_cached(name):
        raise InterpscopeError(f"{name!r} is not in this server's Hugging Face cache, and a shared server "
                               "downloads nothing for its visitors: pick a bundled model, or ask the operator to "
                               "download it.")
    return name
