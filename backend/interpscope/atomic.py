"""Every file Interpscope writes goes through here: a temporary file with a unique name in the target's folder,
flushed and fsynced, then renamed over the target. A reader (or a resumed run) never sees half a file; on any
error the temporary file is removed and the target is left as it was. A full disk is one clear error ("No space
left on device writing X"), never a traceback or a truncated file.

Temporary names are `.<name>.<pid>.<tag>.<random>.tmp`, the tag an HMAC of the writing process's id under a secret
kept in the data directory (`.interpscope-key`, 32 random bytes made on first use, readable by its owner only): a
run killed mid-write leaves one behind, and `remove_stale_temps` (called when an output folder is claimed) deletes
those whose tag proves they are ours and whose writing process is gone. A person's own file that merely looks like
one (`.notes.99999.bak.tmp`) carries no valid tag and is never touched. The same secret signs output markers
(interpscope.outputs), so a hand-written or copied marker is not taken for one Interpscope wrote.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from interpscope.config import InterpscopeError, _data_dir_setting

_TEMP = re.compile(r"^\..+\.(\d+)\.([0-9a-f]{16})\.[A-Za-z0-9_]+\.tmp$")
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
FULL_DISK = _FULL  # the errors that mean "no space left" (a full disk, a quota, a file too large)
KEY_FILE = ".interpscope-key"
_KEYS: dict[str, bytes] = {}  # data directory's key file -> its secret, read once per process
_EPHEMERAL = secrets.token_bytes(32)  # when the data directory cannot hold a key: this process's own temps only


def _secret(create: bool) -> bytes | None:
    """The data directory's secret; made there on first use when `create` (None when it has none and create is
    False). A data directory that cannot hold one (read-only, a file) falls back to a key of this process alone: its
    temporary files are then still removed on error, but one a kill leaves is not recognised later."""
    try:
        folder = _data_dir_setting()[0]
    except InterpscopeError:
        return _EPHEMERAL if create else None
    path = folder / KEY_FILE
    known = _KEYS.get(str(path))
    if known is not None:
        return known
    for _attempt in range(20):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = None
        except OSError:
            return _EPHEMERAL if create else None
        if data is not None and len(data) == 32:
            _KEYS[str(path)] = data
            return data
        if data is None and not create:
            return None
        if data is None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue  # another process made it a moment ago: read it
            except OSError:
                return _EPHEMERAL
            try:
                written = os.write(fd, secrets.token_bytes(32))
            except OSError:
                written = 0
            finally:
                os.close(fd)
            if written != 32:  # e.g. a full disk: leave no short key behind to poison later runs
                with suppress(OSError):
                    path.unlink()
                return _EPHEMERAL
            continue
        time.sleep(0.01)  # a key being written by another process right now
    return _EPHEMERAL if create else None


def sign(text: str, create: bool = True) -> str | None:
    """An HMAC of `text` under the data directory's secret (32 hex digits), None when there is no secret."""
    key = _secret(create)
    return None if key is None else hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32]


def signed(text: str, signature: object) -> bool:
    """Whether `signature` is sign(text) under the data directory's secret (never true without one)."""
    if not isinstance(signature, str):
        return False
    return any(hmac.compare_digest(hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32], signature)
               for key in (_secret(False), _EPHEMERAL) if key is not None)


def _tag(pid: int, key: bytes) -> str:
    return hmac.new(key, f"temp:{pid}".encode(), hashlib.sha256).hexdigest()[:16]


def temp_prefix(target: str | Path, pid: int | None = None) -> str:
    """The start of a temporary file's name for `target` written by process `pid` (default this one)."""
    pid = os.getpid() if pid is None else pid
    key = _secret(True) or _EPHEMERAL
    return f".{Path(target).name}.{pid}.{_tag(pid, key)}."


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


_MODE = 0o666 & ~_umask()


def write_error(err: OSError, path: str | Path) -> InterpscopeError:
    """The one-line error for an OSError met while writing `path`."""
    if err.errno in _FULL:
        return InterpscopeError(f"No space left on device writing {path}.")
    reason = err.strerror or str(err)
    return InterpscopeError(f"Cannot write {path}: {reason}.")


def _own_temp(name: str) -> int | None:
    """The writing process's id when `name` is one of this module's temporary files (its tag verified), else None."""
    found = _TEMP.match(name)
    if not found:
        return None
    pid, tag = int(found.group(1)), found.group(2)
    keys = [key for key in (_secret(False), _EPHEMERAL) if key is not None]
    return pid if any(hmac.compare_digest(_tag(pid, key), tag) for key in keys) else None


def is_temp_name(name: str) -> bool:
    """Whether `name` is one of this module's temporary files: the name's pattern and its tag, which only this data
    directory's secret makes (a file that merely looks like one is a person's, and is kept)."""
    return _own_temp(name) is not None


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file next to `path` for writing; on a clean exit it is fsynced and renamed to `path`.

    On any error (the body's or the disk's) the temporary file is deleted and `path` is untouched; an OSError
    becomes an InterpscopeError naming `path` (a full disk: "No space left on device writing PATH")."""
    if "w" not in mode:
        raise ValueError("atomic_open writes whole files: mode must be 'w' or 'wb'")
    target = Path(path)
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=temp_prefix(target), suffix=".tmp")
    except OSError as err:
        raise write_error(err, target) from None
    try:
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        with suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise write_error(err, target) from None
        raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_open(path, "w") as handle:
        handle.write(text)
    return Path(path)


def write_json(path: str | Path, value, indent: int | None = 2) -> Path:
    """Write `value` as JSON to `path` atomically."""
    return write_text(path, json.dumps(value, indent=indent))


def write_with(path: str | Path, writer: Callable[[IO[bytes]], object]) -> Path:
    """Call `writer(handle)` on a binary temporary file (np.save, savefig, to_csv...) and install it at `path`."""
    with atomic_open(path, "wb") as handle:
        writer(handle)
    return Path(path)


def replace(source: str | Path, target: str | Path) -> None:
    """os.replace with the one-line error."""
    try:
        os.replace(source, target)
    except OSError as err:
        raise write_error(err, target) from None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the temporary files a killed run left in `folder` and its sub-folders (only names this module makes,
    their tag verified, only of processes no longer running); returns what was removed."""
    removed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return removed
    for path in root.rglob(".*.tmp"):
        pid = _own_temp(path.name)
        if pid is not None and path.is_file() and not path.is_symlink() and not _alive(pid):
            with suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed
