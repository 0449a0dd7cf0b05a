"""Where commands write: a folder is never emptied, or silently filled, unless Interpscope created it.

A folder a command creates (or finds empty) gets a marker file, `.interpscope-output.json`, that lists every file
and sub-folder the command wrote there. Later runs write into such a folder freely and delete only what the marker
lists. A non-empty folder without the marker (made by a person or another program) is refused unless `force` is
given; even then nothing that was already there is deleted, only the files Interpscope itself wrote and recorded.
Output file paths (`--json FILE`, `--png FILE`) are checked before any computation: a missing or read-only
parent folder fails at once, not after minutes of work.

A marker Interpscope writes now carries a random id and its signature under the data directory's secret
(interpscope.atomic.sign). The folders a command names for itself (a store's `<store>.partial/` working folder) are
used only when their marker is signed so (`check_own_folder`): a folder there without one, or with a hand-written
or copied marker, is refused even with --force and nothing in it is touched. Folders a person names (`--out`)
still accept the unsigned markers older versions wrote (the shipped stores carry those). A file a command is about
to write that is already there and not recorded in the marker (a person's own `rows.jsonl`) is refused
(`foreign_files`), never overwritten or read as the command's own.
"""
from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from interpscope.atomic import is_temp_name, remove_stale_temps, sign, signed, write_json
from interpscope.config import InterpscopeError

MARKER = ".interpscope-output.json"


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """Raise unless a file can be written at `path` (its folder exists and is writable); no side effects."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InterpscopeError(f"{flag} {path} is a folder; give a file name.")
    if path.exists() and not path.is_file():
        raise InterpscopeError(f"{flag} {path} is not a regular file; give a file name.")
    parent = path.parent
    if not parent.is_dir():
        existing = _nearest_existing(parent)
        if existing.exists() and not existing.is_dir():
            raise InterpscopeError(f"{flag} {path}: {existing} is a file, not a folder.")
        raise InterpscopeError(f"{flag} {path}: the folder {parent} does not exist; create it first or choose "
                               "another path.")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InterpscopeError(f"{flag} {path}: cannot write there (permission denied).")
    return path


def safe_entry(folder: Path, entry: object) -> bool:
    """Whether a marker entry names something inside `folder`: a relative path without '..' that, resolved with
    symlinks followed, stays inside the folder. Anything else (a hand-edited or planted marker) is never trusted."""
    if not isinstance(entry, str) or not entry or "\0" in entry or "\\" in entry:
        return False
    parts = Path(entry.rstrip("/")).parts
    if not parts or Path(entry).is_absolute() or ".." in parts or entry.startswith("~"):
        return False
    root = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(Path(folder) / entry.rstrip("/")))
    return target != root and target.is_relative_to(root)


def read_marker(folder: Path) -> dict | None:
    """The marker of a folder Interpscope writes into, or None when it has none (or an unreadable one). Entries
    that would name anything outside the folder are dropped (see safe_entry)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), list):
        return None
    marker["files"] = [entry for entry in marker["files"] if safe_entry(Path(folder), entry)]
    return marker


def new_marker(command: str, created: bool) -> dict:
    """A fresh marker: nothing recorded yet, a random id and its signature (see signed_marker)."""
    marker_id = secrets.token_hex(16)
    return {"tool": "interpscope", "command": command, "created": created, "files": [], "id": marker_id,
            "sig": sign(f"marker:{marker_id}")}


def signed_marker(marker: dict | None) -> bool:
    """Whether a marker was written by Interpscope under this data directory: its id signed with the secret only
    this data directory holds (a hand-written marker, or one copied from elsewhere, is not)."""
    return (isinstance(marker, dict) and isinstance(marker.get("id"), str)
            and signed(f"marker:{marker['id']}", marker.get("sig")))


def _only_temps(folder: Path) -> bool:
    """Whether a folder holds nothing, or nothing but Interpscope's own temporary files (what a run killed while it
    wrote the folder's first marker leaves)."""
    return all(path.is_file() and is_temp_name(path.name) for path in folder.iterdir())


def check_own_folder(path: str | Path, what: str) -> Path:
    """Raise unless the folder at `path` (one a command names for itself, e.g. `<store>.partial`) is absent, empty,
    or carries a marker Interpscope signed here; no side effects. --force does not change this: a folder of that name
    that Interpscope did not make is a person's, and nothing in it may be deleted."""
    path = Path(path).expanduser()
    if not path.exists() and not path.is_symlink():
        return path
    if path.is_symlink() or not path.is_dir():
        raise InterpscopeError(f"{what} {path} is not a folder Interpscope made (it is a "
                               f"{'link' if path.is_symlink() else 'file'}); move it away, then run again.")
    if _only_temps(path) or signed_marker(read_marker(path)):
        return path
    raise InterpscopeError(f"{what} {path} was not made by Interpscope with this data directory (it has no signed "
                           f"{MARKER}), so it is left as it is, even with --force; move it away or delete it "
                           "yourself, then run again.")


def foreign_files(folder: str | Path, names: tuple[str, ...] | list[str]) -> list[str]:
    """Of the files a command will write into `folder` (relative names), those already there that its marker does
    not list as Interpscope's: a person's files of the same name, never to be overwritten or read as ours."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return []
    marker = read_marker(folder)
    own = set(marker["files"]) if marker else set()
    return [name for name in names if ((folder / name).exists() or (folder / name).is_symlink()) and name not in own]


def refuse_foreign_files(folder: str | Path, names: tuple[str, ...] | list[str], flag: str = "--out") -> None:
    """Raise, naming them, when files a command is about to write into `folder` are there and not Interpscope's."""
    foreign = foreign_files(folder, names)
    if foreign:
        raise InterpscopeError(f"{flag} {folder} already holds {', '.join(foreign)}, which Interpscope did not write "
                               "there; it is neither overwritten nor read as a result. Choose a new folder (or "
                               "move that file away).")


def foreign_entries(folder: Path) -> list[str]:
    """Names in folder that Interpscope did not write there (all of them when the folder has no marker)."""
    marker = read_marker(folder)
    if marker is not None and marker.get("created"):
        return []
    own = {entry.split("/", 1)[0] for entry in marker["files"]} if marker else set()
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in (MARKER, MARKER + ".tmp") and p.name not in own and not is_temp_name(p.name))


def check_output_folder(path: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """Raise unless a command may write into the folder at `path`; no side effects.

    Allowed: a new folder (its nearest existing parent writable), an empty one, one Interpscope created, or any
    folder with force (what is there survives).
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InterpscopeError(f"{flag} {path} is a file, not a folder.")
    if not path.exists():
        parent = _nearest_existing(path.parent)
        if not parent.is_dir():
            raise InterpscopeError(f"{flag} {path}: {parent} is a file, not a folder.")
        if not os.access(parent, os.W_OK):
            raise InterpscopeError(f"{flag} {path}: cannot create it in {parent} (permission denied).")
        return path
    if not os.access(path, os.W_OK):
        raise InterpscopeError(f"{flag} {path}: cannot write there (permission denied).")
    foreign = foreign_entries(path)
    if foreign and not force:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise InterpscopeError(
            f"{flag} {path} already holds {len(foreign)} file(s) or folder(s) Interpscope did not write ({shown}); "
            "choose a new or empty folder, or pass --force to write into it (nothing already there is deleted).")
    return path


class OutputFolder:
    """A folder a command writes into, with the marker that lists what it wrote (the only things it may delete)."""

    def __init__(self, path: Path, marker: dict):
        self.path = path
        self.marker = marker

    @classmethod
    def claim(cls, path: str | Path, *, force: bool = False, command: str = "") -> OutputFolder:
        """Check the folder (see check_output_folder), create it if needed and write its marker."""
        path = Path(os.path.abspath(check_output_folder(path, force)))
        marker = read_marker(path) if path.is_dir() else None
        if marker is None:
            empty = not path.exists() or _only_temps(path)
            marker = new_marker(command, empty)
        existed = path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InterpscopeError(f"Cannot create the folder {path}: {err.strerror or err}.") from None
        folder = cls(path, marker)
        try:
            folder._save()
        except InterpscopeError:
            if not existed:  # e.g. a full disk: leave no empty folder behind
                with suppress(OSError):
                    path.rmdir()
            raise
        remove_stale_temps(path)
        return folder

    def _save(self) -> None:
        write_json(self.path / MARKER, self.marker, indent=1)

    def _relative(self, path: str | Path) -> str:
        """Paths are absolute (inside the folder) or relative to the folder; anything outside it is refused."""
        path = Path(path)
        if path.is_absolute():
            try:
                path = path.relative_to(self.path)
            except ValueError:
                raise InterpscopeError(f"{path} is outside the output folder {self.path}.") from None
        if ".." in path.parts:
            raise InterpscopeError(f"{path} is outside the output folder {self.path}.")
        return path.as_posix()

    @property
    def files(self) -> list[str]:
        return list(self.marker["files"])

    def owns(self, path: str | Path) -> bool:
        rel = self._relative(path)
        return rel in self.marker["files"] or rel + "/" in self.marker["files"]

    def record(self, *paths: str | Path) -> None:
        """Note files (or folders, recorded as 'name/') as written by this command."""
        entries = self.marker["files"]
        changed = False
        for path in paths:
            rel = self._relative(path)
            if isinstance(path, str) and path.endswith("/"):  # a folder about to be made
                rel += "/"
            if Path(self.path / rel).is_dir() and not rel.endswith("/"):
                rel += "/"
            if rel not in entries:
                entries.append(rel)
                changed = True
        if changed:
            self._save()

    def mkdir(self, path: str | Path) -> Path:
        """Create a sub-folder (and its parents), recording each one this call creates. The record is saved
        before the folders are made, so a kill in between never leaves a folder of ours the marker does not list
        (a listed folder that does not exist is harmless)."""
        target = self.path / self._relative(path)
        missing = [p for p in (target, *target.parents) if p.is_relative_to(self.path) and p != self.path
                   and not p.exists()]
        self.record(*(self._relative(p) + "/" for p in reversed(missing)))
        target.mkdir(parents=True, exist_ok=True)
        return target

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Record every file and sub-folder a library call creates or rewrites in the folder (e.g. save_pretrained)."""
        before = self._snapshot()
        try:
            yield
        finally:
            after = self._snapshot()
            self.record(*sorted(p for p, stamp in after.items() if p not in before or before[p] != stamp))

    def _snapshot(self) -> dict[str, tuple[int, int] | None]:
        """(mtime, size) of every file, None for every folder, by path relative to the folder."""
        stamps: dict[str, tuple[int, int] | None] = {}
        for path in self.path.rglob("*"):
            if path.is_dir():
                stamps[self._relative(path)] = None
            elif path.is_file() and path.name != MARKER:
                stat = path.stat()
                stamps[self._relative(path)] = (stat.st_mtime_ns, stat.st_size)
        return stamps

    def remove(self, path: str | Path) -> None:
        """Delete one recorded file, or everything recorded under a folder (the folder too once empty).

        Anything not recorded is left where it is."""
        rel = self._relative(path).rstrip("/")
        entries = self.marker["files"]
        inside = [e for e in entries if e.rstrip("/") == rel or e.startswith(rel + "/")]
        for entry in sorted((e for e in inside if not e.endswith("/")), reverse=True):
            if safe_entry(self.path, entry):
                (self.path / entry).unlink(missing_ok=True)
            entries.remove(entry)
        for entry in sorted((e for e in inside if e.endswith("/")), key=len, reverse=True):
            folder = self.path / entry
            if safe_entry(self.path, entry) and folder.is_dir() and not folder.is_symlink() \
                    and not any(folder.iterdir()):
                folder.rmdir()
            if not folder.exists():
                entries.remove(entry)
        self._save()

    def clear(self) -> None:
        """Delete every recorded file and folder, keeping the folder and anything else in it."""
        for entry in sorted({e.split("/", 1)[0] for e in self.marker["files"]}):
            self.remove(entry)

    def remove_all(self) -> None:
        """clear(); the folder itself (with its marker) goes too if then empty and Interpscope created it."""
        self.clear()
        leftover = [p for p in self.path.iterdir() if p.name != MARKER]
        if not leftover and self.marker.get("created"):
            (self.path / MARKER).unlink(missing_ok=True)
            self.path.rmdir()
