"""Per-feature statistics from the sparse activations of a whole corpus (pure numpy, deterministic).

Input: every nonzero activation as (token index, feature, value), token index = sequence * context + position.
Everything a feature card shows from the corpus comes out of one sort by (feature, -value, token):
- top K contexts: the K largest activations (ties broken by earlier token), each with the feature's activation
  on every token within +-W of it (NaN outside the sequence);
- interval samples: 10 equal-width activation intervals (0, max/10], (max/10, 2 max/10], ..., P random examples
  each (seeded per feature), shown largest first; intervals, not quantiles;
- histogram of the nonzero activations on [0, max]; density = nonzero count / counted tokens; max; mean.
"""
from __future__ import annotations

import numpy as np

from interpscope.sae.store.layout import StoreSpec


def _windows(centres: np.ndarray, half: int, context: int, n_tokens: int, toks_sorted: np.ndarray,
             vals_by_tok: np.ndarray) -> np.ndarray:
    """Activation of the feature on each token of the windows around `centres`: [len(centres), 2 half + 1]."""
    offsets = np.arange(-half, half + 1)
    positions = centres[:, None] + offsets[None, :]
    inside = (positions >= 0) & (positions < n_tokens) & (positions // context == centres[:, None] // context)
    index = np.searchsorted(toks_sorted, positions)
    index_clipped = np.minimum(index, len(toks_sorted) - 1)
    found = (index < len(toks_sorted)) & (toks_sorted[index_clipped] == positions)
    values = np.where(found, vals_by_tok[index_clipped], 0.0)
    return np.where(inside, values, np.nan).astype(np.float32)


def allocate(spec: StoreSpec) -> dict[str, np.ndarray]:
    """Empty per-feature arrays (fill values for features that never fire)."""
    d, K, intervals, P, B = spec.d_sae, spec.top_k, spec.n_intervals, spec.per_interval, spec.hist_bins
    return {
        "fire_count": np.zeros(d, np.int64),
        "max_act": np.zeros(d, np.float32),
        "mean_act": np.zeros(d, np.float32),
        "top_loc": np.full((d, K, 2), -1, np.int32),
        "top_act": np.zeros((d, K), np.float32),
        "top_window": np.full((d, K, 2 * spec.window_top + 1), np.nan, np.float16),
        "int_loc": np.full((d, intervals, P, 2), -1, np.int32),
        "int_act": np.zeros((d, intervals, P), np.float32),
        "int_window": np.full((d, intervals, P, 2 * spec.window_interval + 1), np.nan, np.float16),
        "hist_counts": np.zeros((d, B), np.int32),
    }


def feature_stats(spec: StoreSpec, tok: np.ndarray, feat: np.ndarray, val: np.ndarray,
                  n_seqs: int, progress=None) -> dict[str, np.ndarray]:
    """All corpus-derived per-feature arrays from the nonzero activations (tok, feat, val)."""
    context = spec.context_size
    n_tokens = n_seqs * context
    out = allocate(spec)
    order = np.lexsort((tok, -val, feat))
    tok, feat, val = tok[order], feat[order], val[order]
    bounds = np.searchsorted(feat, np.arange(spec.d_sae + 1))
    K, intervals, P = spec.top_k, spec.n_intervals, spec.per_interval
    for i in range(spec.d_sae):
        a, b = int(bounds[i]), int(bounds[i + 1])
        if b == a:
            continue
        seg_val, seg_tok = val[a:b], tok[a:b]
        top_max = float(seg_val[0])
        out["fire_count"][i] = b - a
        out["max_act"][i] = top_max
        out["mean_act"][i] = float(seg_val.astype(np.float64).mean())
        by_tok = np.argsort(seg_tok, kind="stable")
        toks_sorted, vals_by_tok = seg_tok[by_tok], seg_val[by_tok]
        k = min(K, b - a)
        top_tok = seg_tok[:k]
        out["top_loc"][i, :k, 0] = top_tok // context
        out["top_loc"][i, :k, 1] = top_tok % context
        out["top_act"][i, :k] = seg_val[:k]
        out["top_window"][i, :k] = _windows(top_tok, spec.window_top, context, n_tokens, toks_sorted, vals_by_tok)
        out["hist_counts"][i] = np.histogram(seg_val, bins=spec.hist_bins, range=(0.0, top_max))[0]
        interval = np.clip(np.ceil(seg_val / top_max * intervals).astype(np.int64) - 1, 0, intervals - 1)
        rng = np.random.default_rng([spec.seed, i])
        for j in range(intervals):
            members = np.flatnonzero(interval == j)
            if members.size == 0:
                continue
            chosen = np.sort(rng.choice(members, size=min(P, members.size), replace=False))
            centres = seg_tok[chosen]
            n = chosen.size
            out["int_loc"][i, j, :n, 0] = centres // context
            out["int_loc"][i, j, :n, 1] = centres % context
            out["int_act"][i, j, :n] = seg_val[chosen]
            out["int_window"][i, j, :n] = _windows(centres, spec.window_interval, context, n_tokens, toks_sorted,
                                                   vals_by_tok)
        if progress and (i % 256 == 0 or i == spec.d_sae - 1):
            progress(i + 1, spec.d_sae)
    return out
