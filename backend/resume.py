"""Resuming long work (SAE training checkpoints, partial store builds) only under the settings it was started with.

A resume with other settings would mix two runs (or silently return the old result under the new settings), so it
is refused with a message naming each setting that differs, its old and its new value; force starts afresh.
"""
from __future__ import annotations

import json
from typing import Mapping

from backend.config import InterpscopeError


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
