"""Find features in a store: by id, by a token among their top logits, by a word in their top contexts.

Token matching is case-insensitive on the token's text with surrounding whitespace stripped (" Paris" and
"paris" match the query "Paris"). A word in contexts also matches when it spans several tokens, if a tokenizer
is given (its tokenisations with and without a leading space are searched as token sequences).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from backend.config import InterpscopeError
from backend.sae_store.store import FeatureStore

MAX_QUERY_CHARS = 100
KINDS = ("id", "logit", "context")


def _clean(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InterpscopeError("The search is empty: type a feature id, a token or a word.")
    if len(query) > MAX_QUERY_CHARS:
        raise InterpscopeError(f"The search is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}.")
    return query.strip()


def search_ids(store: FeatureStore, query: str) -> list[int]:
    """Feature ids from '12', '#12' or '12, 40 77' (each checked against the SAE's width)."""
    parts = [p for p in re.split(r"[,\s]+", _clean(query).replace("#", " ")) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise InterpscopeError(f"{query!r} is not a feature id: type a number from 0 to {store.d_sae - 1}.")
    return [store.check_id(int(p)) for p in parts]


@lru_cache(maxsize=8)
def _normalised_vocab(folder: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    vocab = FeatureStore(folder).vocab
    keys = np.array([t.strip().lower() for t in vocab], dtype=object)
    index: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, []).append(i)
    return keys, {k: np.array(v) for k, v in index.items()}


def matching_token_ids(store: FeatureStore, text: str) -> np.ndarray:
    """Vocabulary ids whose stripped, lower-cased text equals the query's."""
    _, index = _normalised_vocab(str(store.folder.resolve()))
    return index.get(text.strip().lower(), np.zeros(0, np.int64))


def search_logits(store: FeatureStore, query: str, side: str = "top") -> list[dict]:
    """Features whose top (or bottom) logit tokens include the query token, strongest weight first."""
    ids = matching_token_ids(store, _clean(query))
    if ids.size == 0:
        return []
    prefix = "logit_top" if side == "top" else "logit_bottom"
    table = np.asarray(store.arrays[f"{prefix}_ids"])
    weights = np.asarray(store.arrays[f"{prefix}_vals"])
    hit = np.isin(table, ids)
    features, ranks = np.nonzero(hit)
    rows = [{"feature": int(f), "rank": int(r) + 1, "token": store.token_text(int(table[f, r])),
             "weight": float(weights[f, r])} for f, r in zip(features, ranks)]
    rows.sort(key=lambda row: -abs(row["weight"]))
    return rows


def _sequences(store: FeatureStore, word: str, tokenizer) -> list[np.ndarray]:
    found = [np.array([i]) for i in matching_token_ids(store, word)]
    if tokenizer is not None:
        for variant in {word, " " + word, word.lower(), " " + word.lower(), word.capitalize(),
                        " " + word.capitalize()}:
            ids = tokenizer(variant, add_special_tokens=False).input_ids
            if len(ids) > 1:
                found.append(np.array(ids))
    return found


def search_contexts(store: FeatureStore, word: str, tokenizer=None) -> list[dict]:
    """Features with the word in their top contexts: [{feature, contexts (how many of the top K), density}]."""
    word = _clean(word)
    windows = store.top_window_tokens()
    counts = np.zeros(windows.shape[:2], bool)
    for sequence in _sequences(store, word, tokenizer):
        n = len(sequence)
        if n > windows.shape[2]:
            continue
        match = np.ones(windows[..., : windows.shape[2] - n + 1].shape, bool)
        for k, token in enumerate(sequence):
            match &= windows[..., k: windows.shape[2] - n + 1 + k] == token
        counts |= match.any(axis=2)
    per_feature = counts.sum(axis=1)
    features = np.flatnonzero(per_feature)
    rows = [{"feature": int(f), "contexts": int(per_feature[f]), "density": float(store.density[f])}
            for f in features]
    rows.sort(key=lambda row: (-row["contexts"], row["feature"]))
    return rows


def search(store: FeatureStore, query: str, kind: str, tokenizer=None) -> list[dict]:
    """One entry point for pages and the command line: kind is 'id', 'logit' or 'context'."""
    if kind == "id":
        return [{"feature": i, "density": float(store.density[i]), "max_activation": float(store.max_activation[i])}
                for i in search_ids(store, query)]
    if kind == "logit":
        return search_logits(store, query)
    if kind == "context":
        return search_contexts(store, query, tokenizer)
    raise InterpscopeError(f"Unknown search kind {kind!r}: choose one of {', '.join(KINDS)}.")
