"""A deterministic label for every feature of a store: what it fires on and what it promotes.

Built from the store alone (the tokens at each feature's top activations, its top logit weights), so every store
has labels, old ones included: "fires on ' conscious', ' consciousness' · promotes ' of', ' that'". A dead feature
is labelled "dead (never fired on the store's corpus)". Written to labels.json by the store build; read from there
when present, computed (~0.1 s) otherwise.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

LABELS_FILE = "labels.json"
DEAD = "dead (never fired on the store's corpus)"


def _shown(token: str) -> str:
    return repr(token) if token.strip() else repr(token) + " (whitespace)"


def compute_labels(arrays, vocab: list[str], n_fire: int = 2, n_logit: int = 2) -> list[str]:
    """One label per feature from a store's arrays (top_loc, tokens, logit_top_ids, fire_count) and vocabulary."""
    loc = np.asarray(arrays["top_loc"])
    tokens = np.asarray(arrays["tokens"])
    logit_ids = np.asarray(arrays["logit_top_ids"][:, :n_logit])
    fired = np.asarray(arrays["fire_count"]) > 0

    def text(token_id: int) -> str:
        return vocab[token_id] if 0 <= token_id < len(vocab) else ""

    labels = []
    for feature in range(len(fired)):
        if not fired[feature]:
            labels.append(DEAD)
            continue
        rows = loc[feature][loc[feature][:, 0] >= 0]
        counts = Counter(text(int(t)) for t in tokens[rows[:, 0], rows[:, 1]])
        fires = ", ".join(_shown(t) for t, _ in counts.most_common(n_fire))
        promotes = ", ".join(_shown(text(int(t))) for t in logit_ids[feature])
        labels.append(f"fires on {fires} · promotes {promotes}")
    return labels
