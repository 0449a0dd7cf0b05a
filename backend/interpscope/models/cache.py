"""The one model cache of a process: one copy per (resolved location, device, dtype), least recently used first out.

Every browser session and command of the process shares it. Two spellings of one folder (a relative path, a
trailing slash, a symlink, the bundled name and its converted folder) resolve to the same key and so to the same
copy. The copies together stay under a memory budget ($INTERPSCOPE_MODEL_MEMORY_MB, default 40% of the machine's
RAM): before a new model is loaded, the least recently used models that nobody is using are dropped until its
estimated size fits. A model is in use while some run holds its lock (interpscope.capture.model_lock) or sits inside
`using(lm)`; one model is always allowed, even alone over the budget.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import struct
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interpscope.capture import lock_held
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MEMORY_ENV = "INTERPSCOPE_MODEL_MEMORY_MB"
DEFAULT_FRACTION = 0.4
Key = tuple[str, str, str]

_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}


def memory_budget() -> int:
    """Bytes the cached models may take together: $INTERPSCOPE_MODEL_MEMORY_MB, else 40% of RAM."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        try:
            megabytes = float(raw)
        except ValueError:
            raise InterpscopeError(f"{MEMORY_ENV} must be a number of megabytes, got {raw!r}.") from None
        if not megabytes > 0:
            raise InterpscopeError(f"{MEMORY_ENV} must be positive, got {raw!r}.")
        return int(megabytes * 2**20)
    import psutil

    return int(psutil.virtual_memory().total * DEFAULT_FRACTION)


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes held by a model's parameters and buffers (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def estimate_bytes(location: str, dtype: torch.dtype) -> int | None:
    """A model folder's size once loaded in `dtype`, from its safetensors headers (None when unknown)."""
    folder = Path(location)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    width = torch.empty((), dtype=dtype).element_size()
    total = 0
    try:
        for file in files:
            with open(file, "rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                if size > file.stat().st_size - 8:  # not a safetensors header: the loader will say so
                    return None
                header = json.loads(handle.read(size))
            for name, info in header.items():
                if name != "__metadata__" and info.get("dtype") in _SAFETENSORS_BYTES:
                    numel = 1
                    for dim in info.get("shape", []):
                        numel *= int(dim)
                    floating = info["dtype"] in ("F64", "F32", "F16", "BF16")
                    total += numel * (width if floating else _SAFETENSORS_BYTES[info["dtype"]])
    except (OSError, ValueError, struct.error, AttributeError):
        return None
    return total


def _release_memory() -> None:
    """Give freed model memory back to the operating system (glibc keeps large freed arenas otherwise)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ModelCache:
    """Loaded models by key, least recently used first; see the module docstring."""

    def __init__(self) -> None:
        self._models: OrderedDict[Key, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}
        self._users: Counter = Counter()
        self.evicted: list[Key] = []

    def get_or_load(self, key: Key, load: Callable[[], LoadedModel], estimate: int | None = None) -> LoadedModel:
        """The cached copy for `key`, or `load()` it once (concurrent callers of one key wait for one load)."""
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key]
            self._make_room(estimate or 0, keep=key)
            loaded = load()
            with self._lock:
                self._models[key] = loaded
                self._loading.pop(key, None)
            self._make_room(0, keep=key)
            return loaded

    def _in_use(self, key: Key, lm: LoadedModel) -> bool:
        return self._users[key] > 0 or lock_held(lm.model)

    def _make_room(self, incoming: int, keep: Key) -> None:
        budget = memory_budget()
        dropped = False
        with self._lock:
            for key in list(self._models):
                total = sum(model_bytes(m.model) for m in self._models.values()) + incoming
                if total <= budget:
                    break
                if key == keep or self._in_use(key, self._models[key]):
                    continue
                del self._models[key]
                self.evicted.append(key)
                dropped = True
        if dropped:
            _release_memory()

    def key_of(self, lm: LoadedModel) -> Key | None:
        with self._lock:
            return next((k for k, m in self._models.items() if m is lm), None)

    @contextmanager
    def using(self, lm: LoadedModel) -> Iterator[None]:
        """Mark a model as in use (never evicted) for the `with` block."""
        key = self.key_of(lm)
        with self._lock:
            self._users[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._users[key] -= 1

    def entries(self) -> list[dict]:
        """What is cached, least recently used first: key, bytes, whether in use."""
        with self._lock:
            items = list(self._models.items())
        return [{"key": key, "name": getattr(m, "name", "?"), "bytes": model_bytes(m.model),
                 "in_use": self._in_use(key, m)} for key, m in items]

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
        _release_memory()


CACHE = ModelCache()

