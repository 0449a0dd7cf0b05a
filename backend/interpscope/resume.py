"""Resuming long work (SAE training checkpoints, partial store builds) only under the settings it was started with.

A resume with other settings would mix two runs (or silently return the old result under the new settings), so it
is refused with a message naming each setting that differs, its old and its new value; force starts afresh.
Append-only logs (rows.jsonl of a whole-file run, a store's explanations.jsonl) are read with read_log, which
drops a torn last line, and appended to with appending.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from interpscope.config import InterpscopeError


def _shown(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def differences(saved: Mapping, wanted: Mapping, where: str = "in the checkpoint") -> list[str]:
    """'name: old <where>, new now' for every setting whose value differs (a missing one counts as different)."""
    missing = object()
    lines = []
    for name in sorted(set(saved) | set(wanted)):
        old, new = saved.get(name, missing), wanted.get(name, missing)
        if old != new:
            old_text = "absent" if old is missing else _shown(old)
            new_text = "absent" if new is missing else _shown(new)
            lines.append(f"{name}: {old_text} {where}, {new_text} now")
    return lines


def check_same_settings(saved: Mapping, wanted: Mapping, *, what: str, where: str, force: bool) -> bool:
    """True when a resume may go on; False when the settings differ and force says start afresh; else an error."""
    changed = differences(saved, wanted, where)
    if not changed:
        return True
    if force:
        return False
    raise InterpscopeError(f"{what} was started with other settings ({'; '.join(changed)}). Run it again with the "
                           "same settings to resume, pass --force to start afresh, or choose another --out.")


def read_log(path: str | Path) -> list[dict]:
    """The JSON entries of a resumable log (one per line). A torn last line (bytes after the last newline, or a
    last line that is not JSON: what a power cut, a kill or a full disk leaves) is cut off the file, so the next
    append starts on a line of its own instead of gluing onto half an entry. Lines before it are never touched
    (one that is not a JSON object is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InterpscopeError(f"Cannot read {path}: {err.strerror or err}.") from None
    lines = data.splitlines(keepends=True)
    keep = len(data)
    if lines and not lines[-1].endswith(b"\n"):
        keep -= len(lines.pop())
    entries = []
    for number, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            entries.append(entry)
        elif number == len(lines) - 1:
            keep -= len(line)
    if keep < len(data):
        try:
            with open(path, "r+b") as handle:
                handle.truncate(keep)
        except OSError as err:
            from interpscope.atomic import write_error

            raise write_error(err, path) from None
    return entries


@contextmanager
def appending(path: str | Path) -> Iterator[Callable[[dict], None]]:
    """Open a resumable log for appending (call read_log first); yields `append(entry)`, which writes one whole
    line straight to the file. A failed write (a full disk) cuts the half-written line off again and is one clear
    error, so the log stays a list of complete lines."""
    from interpscope.atomic import write_error

    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as err:
        raise write_error(err, path) from None

    def append(entry: dict) -> None:
        line = memoryview((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
        start = os.fstat(fd).st_size
        try:
            while line:
                line = line[os.write(fd, line):]
        except OSError as err:
            with suppress(OSError):
                os.ftruncate(fd, start)
            raise write_error(err, path) from None

    try:
        yield append
    finally:
        os.close(fd)
