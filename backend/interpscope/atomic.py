"""Every file Interpscope writes goes through here: a temporary file with a unique name in the target's folder,
flushed and fsynced, then renamed over the target. A reader (or a resumed run) never sees half a file; on any
error the temporary file is removed and the target is left as it was. A full disk is one clear error ("No space
left on device writing X"), never a traceback or a truncated file.

Temporary names are `.<name>.<pid>.<random>.tmp`: a run killed mid-write leaves one behind, and
`remove_stale_temps` (called when an output folder is claimed) deletes those whose writing process is gone.
"""
from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from interpscope.config import InterpscopeError

_TEMP = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+\.tmp$")
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


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


def is_temp_name(name: str) -> bool:
    """Whether `name` is one of this module's temporary files."""
    return _TEMP.match(name) is not None


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
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp")
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
    only of processes no longer running); returns what was removed."""
    removed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return removed
    for path in root.rglob(".*.tmp"):
        found = _TEMP.match(path.name)
        if found and path.is_file() and not _alive(int(found.group(1))):
            with suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed
