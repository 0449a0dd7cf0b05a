"""One storage layer for the precomputed stores (SAE feature stores, entropy-neuron stores, Fourier stores).

A store is a folder holding a manifest (`manifest.json`, written last and atomically, so its presence means the
store is complete) beside its array files. A `StoreKind` names what differs between kinds: what a message calls
it, where the bundled stores are shipped (a folder under assets/), where stores built on this machine go (a folder
under the data directory), the manifest's `kind` tag and format version. Everything else is here once: reading
and writing the manifest, listing stores shipped-then-local, finding one by name or by manifest fields (a model's
content key, an SAE's weights hash), refusing a non-store folder a builder was pointed at, and, on a shared server,
skipping or refusing a store whose files lead outside the allowed folders (interpscope.paths).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interpscope import atomic
from interpscope.config import REPO_ROOT, InterpscopeError, data_dir
from interpscope.paths import confined, confined_folder, display_path, folder_allowed, server_mode
from interpscope.results import Result, to_plain

MANIFEST = "manifest.json"
KIND_KEY = "kind"
VERSION_KEY = "format_version"


def shown(path: str | Path) -> str:
    """A path in a message: as given, and on a shared server relative to its root (never the server's own path)."""
    return display_path(path) if server_mode() else str(path)


def _json_number(value: Any) -> int | float:
    """numpy scalars in a manifest (a result's fields) as plain numbers; anything else is not JSON."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot store {type(value).__name__} in a store manifest")


@dataclass
class StoreKind:
    """One kind of store. Not frozen so a test can point `shipped` at an empty folder (every user sees it)."""

    name: str                         # what a message calls one: "feature store"
    shipped: Path                     # the bundled stores: a folder under assets/
    local: tuple[str, ...]            # stores built here: this folder under the data directory
    build_hint: str                   # how a person builds one (the end of a "not a store" message)
    tag: str | None = None            # manifest["kind"]; None: this kind's manifests carry none
    format_version: int | None = None  # manifest["format_version"] of a new manifest; None: not recorded
    indent: int = 2                   # the manifest's JSON indent (kept, so a rebuilt manifest is the same bytes)
    manifest_name: str = MANIFEST

    def local_root(self) -> Path:
        """Where stores of this kind built on this machine go (the data directory can move: read it each time)."""
        return data_dir().joinpath(*self.local)

    def roots(self) -> tuple[Path, Path]:
        """The folders whose sub-folders are this kind's stores, in the order they are listed: shipped, local."""
        return self.shipped, self.local_root()

    def manifest_path(self, folder: str | Path) -> Path:
        return Path(folder) / self.manifest_name

    def new_manifest(self, **fields: Any) -> dict:
        """A manifest for a new store: the kind's tag and format version (where it records them), then `fields`."""
        manifest: dict[str, Any] = {}
        if self.tag is not None:
            manifest[KIND_KEY] = self.tag
        if self.format_version is not None:
            manifest[VERSION_KEY] = self.format_version
        manifest.update(fields)
        return manifest

    def _ours(self, manifest: Any) -> bool:
        return isinstance(manifest, dict) and (self.tag is None or manifest.get(KIND_KEY) == self.tag)

    def manifest(self, folder: str | Path) -> dict | None:
        """The manifest of a store of this kind in `folder`, or None when there is none: no manifest, one that is
        torn or not JSON, or one of another kind. Never raises; confinement is the caller's (see `folders`)."""
        try:
            manifest = json.loads(self.manifest_path(folder).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return manifest if self._ours(manifest) else None

    def is_store(self, folder: str | Path) -> bool:
        return self.manifest(folder) is not None

    def read_manifest(self, folder: str | Path) -> dict:
        """The manifest of the store a person or a caller named: on a shared server only for a store whose folder
        and files lie inside the allowed folders; a missing, torn or foreign manifest is an error saying so."""
        if server_mode():  # the store and each of its files inside the allowed folders, symlinks followed
            confined_folder(folder, self.name)
        path = self.manifest_path(folder)
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InterpscopeError(f"{shown(folder)} is not a complete {self.name} (no {self.manifest_name}); "
                                   f"{self.build_hint}.") from None
        except OSError as err:
            raise InterpscopeError(f"Cannot read {shown(path)}: {err.strerror or err}.") from None
        except ValueError as err:
            raise InterpscopeError(f"{shown(path)} is not valid JSON ({err}).") from None
        if not self._ours(manifest):
            raise InterpscopeError(f"{shown(folder)} is not {self._a()} {self.name}.")
        return manifest

    def write_manifest(self, folder: str | Path, manifest: dict) -> Path:
        """Write the manifest atomically (a reader sees the old one or the new one, never half)."""
        text = json.dumps(manifest, indent=self.indent, default=_json_number)
        return atomic.write_text(self.manifest_path(folder), text)

    def owned(self, folder: str | Path, flag: str = "") -> dict | None:
        """For a builder about to write into `folder`: None for a missing or empty folder, the manifest of a store
        of this kind; anything else is refused untouched (a builder never writes into a folder it does not own)."""
        folder = Path(folder)
        if not folder.exists() or not any(folder.iterdir()):
            return None
        manifest = self.manifest(folder)
        if manifest is None:
            where = f"{flag} {shown(folder)}" if flag else shown(folder)
            raise InterpscopeError(f"{where} exists and is not {self._a()} {self.name}; choose a new or empty "
                                   "folder.")
        return manifest

    def folders(self) -> list[Path]:
        """Every sub-folder of the roots, shipped then local, each root's sorted by name; a shared server skips a
        folder whose files lead outside its allowed folders (before reading anything in it)."""
        return [child for root in self.roots() if root.is_dir() for child in sorted(root.iterdir())
                if child.is_dir() and folder_allowed(child)]

    def stores(self) -> Iterator[tuple[Path, dict]]:
        """(folder, manifest) of every complete store of this kind, in `folders` order."""
        for folder in self.folders():
            manifest = self.manifest(folder)
            if manifest is not None:
                yield folder, manifest

    def listed(self) -> list[Path]:
        """The complete stores of this kind: the shipped ones, then those built into the data directory."""
        return [folder for folder, _ in self.stores()]

    def find(self, name: str) -> Path | None:
        """The store with this folder name (a shipped one before a local one of the same name), or None."""
        return next((folder for folder in self.listed() if folder.name == name), None)

    def matching(self, **fields: Any) -> Iterator[tuple[Path, dict]]:
        """(folder, manifest) of the stores whose manifest holds every one of `fields` (e.g. model_key=...)."""
        for folder, manifest in self.stores():
            if all(manifest.get(key) == value for key, value in fields.items()):
                yield folder, manifest

    def _a(self) -> str:
        return "an" if self.name[:1].lower() in "aeiou" else "a"


def portable_path(folder: str | Path) -> str:
    """A folder as a manifest records it: relative to the repository when inside it (shipped stores move)."""
    folder = Path(folder).resolve()
    return str(folder.relative_to(REPO_ROOT)) if folder.is_relative_to(REPO_ROOT) else str(folder)


def stored_folder(stored: str, what: str) -> Path:
    """The folder a manifest names (relative paths are inside the repository); on a shared server only one inside
    the allowed folders (a manifest is a file anyone who can write a store can shape)."""
    path = Path(stored)
    path = path if path.is_absolute() else REPO_ROOT / path
    return confined(path, what) if server_mode() else path


def save_npy(path: str | Path, array: np.ndarray) -> Path:
    """One array as an .npy file, atomically (no pickles: a store is data)."""
    return atomic.write_with(path, lambda handle: np.save(handle, array, allow_pickle=False))


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], compressed: bool = True) -> Path:
    """Named arrays as an .npz file, atomically."""
    save = np.savez_compressed if compressed else np.savez
    # numpy's stub types **kwds as if a name could be allow_pickle: bool
    return atomic.write_with(path, lambda handle: save(handle, **arrays))  # type: ignore[arg-type]


@dataclass
class StoreBuild(Result):
    """What a store build wrote (`interpscope sae store`, `neurons store`, `fourier store`): the store's kind, folder,
    model, size on disk and the kind's own figures (`details`: tokens and features of a feature store, layers of a
    neuron store, entries of a Fourier store, timings), flat beside them in the document."""

    kind: str
    store: str
    bytes: int
    model: str | None = None
    details: dict[str, Any] | None = None

    SCHEMA = "interpscope.store_build"
    SCHEMA_VERSION = 1
    TIMING_KEYS = ("seconds", "seconds_this_run", "build_seconds", "tokens_per_second")

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind, "store": self.store, "model": self.model, "bytes": self.bytes,
                **to_plain(self.details or {})}
