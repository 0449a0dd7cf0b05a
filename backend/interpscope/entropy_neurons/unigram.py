"""The unigram direction: centred, normalised log token frequencies of a corpus.

Token counts are cached on disk under data_dir()/neurons/unigram, keyed by a fingerprint of the tokenizer's
vocabulary and the corpus, so any model sharing a tokenizer reuses them across sessions.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from interpscope import corpus
from interpscope.config import InterpscopeError, data_dir
from interpscope.entropy_neurons.store_kind import NEURON_STORES
from interpscope.stores import save_npy

_TOKENIZER_KEYS: dict[int, tuple[object, str]] = {}


def tokenizer_key(tokenizer) -> str:
    """A short fingerprint of a tokenizer's vocabulary (same vocab and ids -> same key), memoised per object."""
    cached = _TOKENIZER_KEYS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    key = hashlib.sha1(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]
    _TOKENIZER_KEYS[id(tokenizer)] = (tokenizer, key)
    return key


def source_key(source: str | Path | None, split: str) -> str:
    if source is None or str(source) in ("austen", "bundled"):
        return f"austen-{split}"
    path = Path(source).expanduser().resolve()
    stamp = path.stat().st_mtime_ns if path.exists() else 0
    return f"{hashlib.sha1(f'{path}:{stamp}'.encode()).hexdigest()[:12]}-{split}"


def shipped_unigram_counts(tokenizer, source, split: str) -> np.ndarray | None:
    """Token counts of a corpus split kept in a store built with the same tokenizer, or None."""
    wanted_tokenizer, wanted_source = tokenizer_key(tokenizer), source_key(source, split)
    for folder, manifest in NEURON_STORES.matching(tokenizer_key=wanted_tokenizer):
        if manifest.get("spec", {}).get("source") == wanted_source and (folder / "unigram_counts.npy").is_file():
            return np.load(folder / "unigram_counts.npy")
    return None


def token_counts(tokenizer, vocab_size: int, source: str | Path | None = None, split: str = "train",
                 max_tokens: int | None = None) -> np.ndarray:
    """How often each token id occurs in the corpus [vocab_size] (int64), cached on disk (or read from an
    entropy-neuron store built with the same tokenizer and corpus)."""
    suffix = f"-{max_tokens}" if max_tokens else ""
    path = data_dir() / "neurons" / "unigram" / f"{tokenizer_key(tokenizer)}-{source_key(source, split)}{suffix}.npy"
    shipped = None
    if not path.is_file() and not max_tokens:
        shipped = shipped_unigram_counts(tokenizer, source, split)
    if path.is_file():
        counts = np.load(path)
    elif shipped is not None:
        counts = shipped
    else:
        ids = corpus.token_stream(tokenizer, corpus.paragraphs(source, split), max_tokens=max_tokens)
        if ids.numel() == 0:
            raise InterpscopeError("The corpus produced no tokens to count.")
        counts = np.bincount(ids.numpy(), minlength=1).astype(np.int64)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_npy(path, counts)
    if counts.shape[0] > vocab_size:
        raise InterpscopeError(f"The tokenizer produced id {counts.shape[0] - 1}, beyond the model's vocabulary "
                               f"of {vocab_size}: the tokenizer does not match the model.")
    return np.pad(counts, (0, vocab_size - counts.shape[0]))


def unigram_log_probs(counts: np.ndarray) -> np.ndarray:
    """log p_unigram with add-one smoothing [V]."""
    smoothed = counts.astype(np.float64) + 1.0
    return np.log(smoothed / smoothed.sum())


def unigram_direction(counts: np.ndarray) -> torch.Tensor:
    """u: the add-one log unigram distribution, centred over vocab and scaled to unit norm [V] (float64)."""
    log_p = unigram_log_probs(counts)
    centred = log_p - log_p.mean()
    norm = np.linalg.norm(centred)
    if norm == 0:
        raise InterpscopeError("Every token has the same count: the unigram direction is undefined.")
    return torch.from_numpy(centred / norm)
