"""Paths the server opens and shows: server mode confines them to a few folders; names are always plain.

On a shared server (INTERPSCOPE_SERVER_MODE=1) a page must not become a way to read, or probe, the server's
file system: every path it opens, typed or read from a file (an SAE's cfg.json, a store's manifest, a file in a
corpus folder), is resolved (home, symlinks, '..') and refused unless it lies inside an allowed root, with one
message whether or not it exists. A path shown in a page is written relative to its root (display_path), never as
the server's absolute path. Run and store names become folder names, so they are plain names.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from interpscope.config import ASSETS_DIR, InterpscopeError, data_dir

SERVER_MODE_ENV = "INTERPSCOPE_SERVER_MODE"
ALLOWED_ROOTS_ENV = "INTERPSCOPE_ALLOWED_ROOTS"
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
DATA_LABEL = "[data dir]"
HF_LABEL = "[Hugging Face cache]"
ALLOWED_LABEL = "[allowed folder]"
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
    return InterpscopeError(f"Paths typed into this shared server (or named in its files) must lie inside its "
                            f"allowed folders ({', '.join(roles)}); this {what} does not. Pick one from the lists, "
                            "or ask the server's operator to allow its folder.")


def inside_roots(path: Path) -> bool:
    """Whether a path, resolved with its symlinks followed, lies inside one of allowed_roots()."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return any(resolved.is_relative_to(root.path) for root in allowed_roots())


def from_display(text: str) -> str:
    """A path written the way display_path shows it ('[data dir]/...', 'assets/...', '[Hugging Face cache]/...',
    '[allowed folder]/...') as a real path; any other text is returned as it is. A model loaded from a folder in
    server mode is named this way (interpscope.models.loading), and the name must load the same folder again."""
    if text.startswith(DATA_LABEL):
        return str(data_dir()) + text[len(DATA_LABEL):]
    if text == "assets" or text.startswith("assets/"):
        return str(ASSETS_DIR.parent / text)
    if text.startswith(HF_LABEL):
        return str(hf_hub_cache()) + text[len(HF_LABEL):]
    if text.startswith(ALLOWED_LABEL):
        rest = text[len(ALLOWED_LABEL):].lstrip("/")
        for root in allowed_roots():
            if ALLOWED_ROOTS_ENV in root.role and (root.path / rest).exists():
                return str(root.path / rest)
    return text



def user_path(text: str, what: str = "path") -> Path:
    """The absolute, symlink-free path a person typed (or the page shows: display_path's form is read back); in
    server mode only inside allowed_roots(), refusing everything else with one message that does not depend on
    whether the path exists."""
    text = from_display((text or "").strip())
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


def confined(path: str | Path, what: str = "path") -> Path:
    """Any path the server is about to open, wherever it came from (typed, or read from a cfg.json or a manifest):
    resolved, and in server mode refused unless it lies inside allowed_roots() (as user_path)."""
    return user_path(str(path), what)


def confined_folder(folder: str | Path, what: str = "folder") -> Path:
    """A folder the server reads files from (a model, an SAE): the folder and, in server mode, every file in it
    resolved inside allowed_roots(), so a file that is a symlink leading outside is refused before it is opened."""
    resolved = confined(folder, what)
    if server_mode() and resolved.is_dir():
        for child in resolved.iterdir():
            if not inside_roots(child):
                raise _refusal(f"{what} (its file {child.name!r} leads outside them)")
    return resolved


def folder_allowed(folder: str | Path) -> bool:
    """Whether the server may read a folder it found itself (a store or SAE listed from the data dir): always
    outside server mode; in it, only when the folder and every file in it resolve inside allowed_roots()."""
    if not server_mode():
        return True
    try:
        confined_folder(folder)
    except InterpscopeError:
        return False
    return True


def display_path(path: str | Path) -> str:
    """How a page shows a path: relative to the bundled assets ('assets/...'), the data directory
    ('[data dir]/...'), the Hugging Face cache or an operator's folder; never the server's absolute path in server
    mode (a path outside every root shows as its last part only). Outside server mode such a path is shown as is.
    A relative text (a bundled model's name, a hub id, 'assets/...') is shown as it is, so any name can pass."""
    text = str(path)
    if not text.startswith(("/", "~")):
        return text
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return Path(text).name if server_mode() else text
    labels = [(ASSETS_DIR.resolve(), "assets"), (data_dir().resolve(), DATA_LABEL),
              (hf_hub_cache().resolve(), HF_LABEL)]
    labels += [(root.path, ALLOWED_LABEL) for root in allowed_roots() if ALLOWED_ROOTS_ENV in root.role]
    for root, label in sorted(labels, key=lambda pair: -len(pair[0].parts)):  # the innermost root names it
        if resolved.is_relative_to(root):
            rest = resolved.relative_to(root).as_posix()
            return label if rest == "." else f"{label}/{rest}"
    return f"…/{resolved.name}" if server_mode() else text


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
