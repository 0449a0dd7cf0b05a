"""Fourier results computed once: per process for every session, and shipped for the bundled models.

What the Fourier page computes on first open with its default settings is kept in a store per model: the
embedding and unembedding spectra of models whose numbers are single tokens, and for models that split numbers
into digits the hidden-state spectra (default context) and the generated addition probe (default prompts).
`interpscope fourier store --model M --out DIR` builds one (interpscope.fourier.store_build; it writes only into a
folder it created or owns); assets/fourier_stores/<model>/ ships them. `recall(lm, key, compute)` answers from
this process's memory, else from a store of the same model (content key), else computes and remembers.
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from interpscope import atomic
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.models.identity import model_key
from interpscope.stores import StoreKind, save_npz

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

FOURIER_STORES = StoreKind(name="Fourier store", shipped=ASSETS_DIR / "fourier_stores", local=("fourier", "stores"),
                           build_hint="build it with `interpscope fourier store --model M --out DIR`",
                           tag="interpscope-fourier-store", indent=1)
Result = TypeVar("Result")

_MEMO: dict[tuple[str, str], Any] = {}  # each key's result type is its compute()'s
_MEMO_LOCK = threading.Lock()
MEMO_ENTRIES = 64


def pairs_digest(pairs: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(np.asarray(pairs, dtype=np.int64)).tobytes()).hexdigest()[:16]


def encode(result) -> tuple[dict[str, np.ndarray], dict]:
    """A flat result dataclass as (arrays, JSON fields); lists of dataclasses become lists of dicts."""
    arrays: dict[str, np.ndarray] = {}
    plain: dict[str, Any] = {"type": type(result).__name__}
    for field in dataclasses.fields(result):
        value = getattr(result, field.name)
        if isinstance(value, np.ndarray):
            arrays[field.name] = value
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            plain[field.name] = [dataclasses.asdict(item) for item in value]
        else:
            plain[field.name] = value
    return arrays, plain


def decode(cls, arrays: dict[str, np.ndarray], plain: dict, items: dict[str, type] | None = None):
    """The inverse of encode for class `cls`; `items` names the dataclass of list fields (e.g. outliers)."""
    values = {name: value for name, value in plain.items() if name != "type"}
    for name, item_cls in (items or {}).items():
        values[name] = [item_cls(**item) for item in values.get(name, [])]
    values.update(arrays)
    return cls(**values)


def stored(lm: LoadedModel, key: str) -> tuple[dict[str, np.ndarray], dict] | None:
    """(arrays, fields) of `key` from a store of this model, or None."""
    for folder, manifest in FOURIER_STORES.matching(model_key=model_key(lm)):
        entry = manifest.get("entries", {}).get(key)
        if entry is not None:
            with np.load(folder / entry["file"]) as data:
                return {name: data[name] for name in data.files}, entry["fields"]
    return None


def recall(lm: LoadedModel, key: str, compute: Callable[[], Result], cls: type, items: dict[str, type] | None = None,
           use_store: bool = True) -> Result:
    """The result named `key` for this model: from this process's memory, a store, or `compute()` (kept)."""
    from interpscope.capture import editing

    if editing(lm.model):  # a result under this run's own edits is nobody else's
        return compute()
    memo_key = (model_key(lm), key)
    with _MEMO_LOCK:
        if memo_key in _MEMO:
            return _MEMO[memo_key]
    found = stored(lm, key) if use_store else None
    result = decode(cls, *found, items=items) if found is not None else compute()
    with _MEMO_LOCK:
        _MEMO[memo_key] = result
        while len(_MEMO) > MEMO_ENTRIES:
            _MEMO.pop(next(iter(_MEMO)))
    return result


def forget() -> None:
    """Drop every result kept in memory (tests)."""
    with _MEMO_LOCK:
        _MEMO.clear()


def save_entries(lm: LoadedModel, out: str | Path, results: dict[str, object]) -> Path:
    """Write results (key -> result dataclass) into the store folder `out` (created, or already this model's
    store; anything else is refused untouched)."""
    folder = Path(out).expanduser()
    manifest = FOURIER_STORES.owned(folder)
    if manifest is not None and manifest.get("model_key") != model_key(lm):
        raise InterpscopeError(f"{folder} holds the Fourier store of another model; choose another folder.")
    folder.mkdir(parents=True, exist_ok=True)
    atomic.remove_stale_temps(folder)  # what a killed build left mid-write
    manifest = manifest or FOURIER_STORES.new_manifest(model=lm.name, model_key=model_key(lm), entries={})
    for key, result in results.items():
        arrays, plain = encode(result)
        name = f"entry-{hashlib.sha1(key.encode()).hexdigest()[:12]}.npz"
        save_npz(folder / name, arrays)
        manifest["entries"][key] = {"file": name, "fields": plain}
    FOURIER_STORES.write_manifest(folder, manifest)
    return folder


def hidden_key(n_numbers: int, template: str, top: int = 5) -> str:
    return f"hidden|{n_numbers}|{template}|{top}"


def embedding_key(n_numbers: int, matrix: str) -> str:
    return f"embedding|{n_numbers}|{matrix}"


def probe_key(pairs: np.ndarray, template: str, prefix: str) -> str:
    return f"probe|{pairs_digest(pairs)}|{template}|{prefix}"
