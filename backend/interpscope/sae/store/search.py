"""Find features in a store: by id, by a token among their top logits, by a word in their top contexts, by words of
their label or explanation. Every result carries the feature's label and its strongest context, so nobody opens a
feature blind; an empty search says why it found nothing.

Token matching is case-insensitive on the token's text with surrounding whitespace stripped (" Paris" and
"paris" match the query "Paris"). A word in contexts also matches when it spans several tokens, if a tokenizer
is given (its tokenisations with and without a leading space are searched as token sequences).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.sae.store.store import FeatureStore

MAX_QUERY_CHARS = 100
KINDS = ("id", "logit", "context", "label")
SNIPPET_HALF = 6


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
    rows: list[dict[str, Any]] = [
        {"feature": int(f), "rank": int(r) + 1, "token": store.token_text(int(table[f, r])),
         "weight": float(weights[f, r])} for f, r in zip(features, ranks, strict=True)]
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


def search_labels(store: FeatureStore, query: str) -> list[dict]:
    """Features whose label or written explanation contains every word of the query (case-insensitive); features
    with an explanation first, best detection score first."""
    words = [w for w in re.split(r"\s+", _clean(query).lower()) if w]
    rows = []
    for feature, label in enumerate(store.labels):
        entry = store.explanations.get(feature) or {}
        text = (label + " " + entry.get("explanation", "")).lower()
        if all(w in text for w in words):
            rows.append({"feature": feature, "score": entry.get("score"), "density": float(store.density[feature])})
    rows.sort(key=lambda row: (row["score"] is None, -(row["score"] or 0.0), row["feature"]))
    return rows


def snippet(store: FeatureStore, feature: int) -> str:
    """The feature's strongest context as text, the firing token in ⟦ ⟧ (empty for a dead feature)."""
    seq, pos = (int(v) for v in np.asarray(store.arrays["top_loc"][feature, 0]))
    if seq < 0:
        return ""
    context = int(store.spec["context_size"])
    first, last = max(0, pos - SNIPPET_HALF), min(context, pos + SNIPPET_HALF + 1)
    ids = np.asarray(store.arrays["tokens"][seq, first:last])
    pieces = [store.token_text(int(t)) for t in ids]
    pieces[pos - first] = f"⟦{pieces[pos - first]}⟧"
    return "".join(pieces).replace("\n", "↵")


def describe(store: FeatureStore, rows: list[dict], limit: int = 200) -> list[dict]:
    """Search results with what a reader needs before opening a feature: its label and its strongest context
    (the first `limit` rows; the rest unchanged)."""
    for row in rows[:limit]:
        row["label"] = store.labels[row["feature"]]
        row["snippet"] = snippet(store, row["feature"])
    return rows


def no_match_reason(store: FeatureStore, query: str, kind: str) -> str:
    """Why a search found nothing, in one sentence."""
    if kind == "logit":
        ids = matching_token_ids(store, query)
        if ids.size == 0:
            return (f"{query.strip()!r} is not a token of this model's vocabulary (spaces and case ignored); a word "
                    "that splits into several tokens never appears among the top logits: search contexts instead.")
        n_top = int(np.asarray(store.arrays["logit_top_ids"]).shape[1])
        return (f"{query.strip()!r} is a token (id {', '.join(str(int(i)) for i in ids[:5])}), but no feature has it "
                f"among its top {n_top} logit weights.")
    if kind == "context":
        return (f"No feature has {query.strip()!r} in its top contexts ({store.top_window_tokens().shape[1]} per "
                "feature, with their surrounding tokens).")
    if kind == "label":
        return f"No feature's label or explanation contains every word of {query.strip()!r}."
    return f"No feature matches {query.strip()!r}."


def search(store: FeatureStore, query: str, kind: str, tokenizer=None) -> list[dict]:
    """One entry point for pages and the command line: kind is 'id', 'logit', 'context' or 'label'; each result
    carries the feature's label and a snippet of its strongest context."""
    if kind == "id":
        rows = [{"feature": i, "density": float(store.density[i]), "max_activation": float(store.max_activation[i])}
                for i in search_ids(store, query)]
    elif kind == "logit":
        rows = search_logits(store, query)
    elif kind == "context":
        rows = search_contexts(store, query, tokenizer)
    elif kind == "label":
        rows = search_labels(store, query)
    else:
        raise InterpscopeError(f"Unknown search kind {kind!r}: choose one of {', '.join(KINDS)}.")
    return describe(store, rows)
