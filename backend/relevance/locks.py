"""One lock per model instance, shared by everything that changes how that instance computes.

A LoadedModel already carries a lock; a bare nn.Module (tiny test models, scripts) gets one from a registry keyed
by the module itself, and a LoadedModel registers its own lock there so both ways reach the same lock.
"""
from __future__ import annotations

import threading
import weakref

from torch import nn

_LOCKS: "weakref.WeakKeyDictionary[nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def model_lock(model: nn.Module, preferred: threading.RLock | None = None) -> threading.RLock:
    """The re-entrant lock serialising rule application on `model` (`preferred`: the LoadedModel's own lock)."""
    with _REGISTRY_LOCK:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = preferred or threading.RLock()
            _LOCKS[model] = lock
        return lock


def lock_of(model_or_lm) -> threading.RLock:
    """The lock for a LoadedModel or a bare model."""
    if isinstance(model_or_lm, nn.Module):  # a bare model (note: HF models have a `.model` submodule)
        return model_lock(model_or_lm)
    return model_lock(model_or_lm.model, getattr(model_or_lm, "lock", None))
