"""Read a finished feature store: open in milliseconds (memory maps), one feature card in milliseconds.

`FeatureStore(path).card(i)` reads only feature i's rows of each array; the overview table (density, max,
top tokens of all features) is a handful of whole-column reads.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.sae.store.documents import FeatureCardDocument
from interpscope.sae.store.layout import (
    ARRAYS,
    FEATURE_STORES,
    MANIFEST,
    WEIGHTS_HASH,
    default_store_dir,
    folder_of,
    list_stores,
    sae_digest,
    weights_sha256,
)


def read_manifest(folder: str | Path) -> dict:
    """A feature store's manifest (interpscope.stores: confined on a shared server, an error when incomplete)."""
    return FEATURE_STORES.read_manifest(folder)


def _built_for(manifest: dict, weights_hash: str, legacy_digest: Callable[[], str]) -> bool:
    """Whether a store's manifest describes an SAE: the weights hash when the manifest records one, else (stores
    built before the hash was recorded) the config+weights digest of its spec."""
    if WEIGHTS_HASH in manifest:
        return manifest[WEIGHTS_HASH] == weights_hash
    try:
        return manifest["spec"]["sae_digest"] == legacy_digest()
    except (KeyError, TypeError, OSError):
        return False


@dataclass
class Histogram:
    """An equal-width histogram: len(edges) == len(counts) + 1."""

    edges: list[float]
    counts: list[int]


def _histogram(low: float, high: float, counts: np.ndarray) -> Histogram:
    """The histogram stored as its counts and range."""
    counts = np.asarray(counts)
    return Histogram(edges=np.linspace(low, high, len(counts) + 1).tolist(), counts=[int(c) for c in counts])


@dataclass
class TokenWeight:
    """A vocabulary token and a feature's logit weight on it."""

    token: str
    weight: float


@dataclass
class Neighbour:
    """Another feature and the cosine of its decoder direction with this one's."""

    feature: int
    cosine: float


@dataclass
class Context:
    """A stretch of corpus around one activation: tokens, the feature's activation on each, and where it is."""

    tokens: list[str]
    activations: list[float | None]
    max: float
    centre: int
    sequence: int
    position: int


@dataclass
class Interval:
    """Samples whose activation lies in (low, high]: one of equal-width intervals from 0 to the max (not quantiles)."""

    low: float
    high: float
    examples: list[Context]


@dataclass
class FeatureCard(FeatureCardDocument):
    """Everything the feature page shows for one feature (typed parts, ready for JSON through to_plain)."""

    id: int
    density: float
    fire_count: int
    max_activation: float
    mean_activation: float
    top_contexts: list[Context]
    intervals: list[Interval]
    histogram: Histogram
    top_logits: list[TokenWeight]
    bottom_logits: list[TokenWeight]
    logit_histogram: Histogram
    neighbours: list[Neighbour]
    n_tokens: int
    label: str = ""
    explanation: dict | None = None
    store: dict = field(default_factory=dict)


class FeatureStore:
    """A complete store folder opened read-only."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        self.manifest = read_manifest(self.folder)  # on a shared server: the store and its files confined first
        self.spec = self.manifest["spec"]
        self.d_sae = int(self.spec["d_sae"])
        self.n_counted = int(self.manifest["n_counted_tokens"])
        self.arrays = {}
        for name in ARRAYS:
            path = self.folder / f"{name}.npy"
            if not path.is_file():
                raise InterpscopeError(f"The feature store {self.folder} lacks {path.name}; rebuild it.")
            self.arrays[name] = np.load(path, mmap_mode="r")

    @classmethod
    def for_sae(cls, sae_folder: str | Path) -> FeatureStore:
        """The store built for exactly this SAE's weights: its default store, else any complete store whose manifest
        records the same weights hash. A store found by name but built for other weights is an error naming both
        hashes, never shown as if it described this SAE."""
        from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE

        folder = Path(sae_folder).expanduser()
        if not (folder / CFG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise InterpscopeError(f"No feature store for {sae_folder}: it is not an SAE folder (it needs {CFG_FILE} "
                                   f"and {WEIGHTS_FILE}).")
        digest = weights_sha256(folder)
        legacy_digest = lru_cache(maxsize=1)(lambda: sae_digest(folder))
        by_name = list(dict.fromkeys([default_store_dir(folder), FEATURE_STORES.shipped / folder.resolve().name]))
        mismatch = None
        for candidate in dict.fromkeys(by_name + list_stores()):
            if not (candidate / MANIFEST).is_file():
                continue
            manifest = read_manifest(candidate)
            if _built_for(manifest, digest, legacy_digest):
                return cls(candidate)
            if candidate in by_name and mismatch is None:
                mismatch = (candidate, manifest)
        if mismatch is not None:
            store, manifest = mismatch
            if WEIGHTS_HASH in manifest:
                built, mine = manifest[WEIGHTS_HASH][:8], digest[:8]
            else:
                built, mine = f"{manifest['spec']['sae_digest'][:8]} (config+weights)", legacy_digest()[:8]
            raise InterpscopeError(
                f"The feature store {store} was built for SAE weights {built}, the SAE at {folder} has {mine}: it "
                f"does not describe this SAE. Build a store for it with `interpscope sae store --sae {folder}`.")
        raise InterpscopeError(f"No feature store for {sae_folder} yet; build it with "
                               f"`interpscope sae store --sae {sae_folder}`.")

    def sae_folder(self) -> Path:
        """The SAE this store describes."""
        return folder_of(self.spec["sae_path"])

    def is_stale(self) -> bool:
        """True when the SAE folder's weights differ from those the store was built for (or the SAE is gone)."""
        try:
            return sae_digest(self.sae_folder()) != self.spec["sae_digest"]
        except (OSError, InterpscopeError):  # gone, or (on a shared server) outside the allowed folders
            return True

    def load_sae(self):
        """The SAE this store was built for; an error if its weights changed since (the store would be stale)."""
        from interpscope.sae.folder import load_sae

        folder = self.sae_folder()
        sae = load_sae(folder)
        if sae_digest(folder) != self.spec["sae_digest"]:
            raise InterpscopeError(f"The SAE at {folder} changed after the store {self.name} was built; rebuild the "
                                   f"store with `interpscope sae store --sae {folder} --force`.")
        return sae

    @cached_property
    def vocab(self) -> list[str]:
        return json.loads((self.folder / "vocab.json").read_text(encoding="utf-8"))

    @property
    def name(self) -> str:
        return self.folder.name

    def check_id(self, feature: int) -> int:
        if not isinstance(feature, (int, np.integer)) or isinstance(feature, bool) or \
                not 0 <= int(feature) < self.d_sae:
            raise InterpscopeError(f"Feature id must be an integer from 0 to {self.d_sae - 1} (got {feature!r}).")
        return int(feature)

    # --- columns for the overview -------------------------------------------------------------------------
    @cached_property
    def density(self) -> np.ndarray:
        return np.asarray(self.arrays["fire_count"], dtype=np.float64) / max(1, self.n_counted)

    @cached_property
    def max_activation(self) -> np.ndarray:
        return np.asarray(self.arrays["max_act"])

    def top_token_ids(self) -> np.ndarray:
        """Token at each feature's strongest activation (-1 for features that never fired)."""
        loc = np.asarray(self.arrays["top_loc"][:, 0])
        tokens = self.arrays["tokens"]
        ids = np.full(self.d_sae, -1, np.int64)
        fired = loc[:, 0] >= 0
        ids[fired] = tokens[loc[fired, 0], loc[fired, 1]]
        return ids

    def top_window_tokens(self) -> np.ndarray:
        """Token ids of every top context window [d_sae, K, 2 W + 1] (-1 outside the sequence or unused)."""
        return self._top_window_tokens

    @cached_property
    def _top_window_tokens(self) -> np.ndarray:
        # per store (an lru_cache on the method was one slot shared by every store, and kept the last one alive)
        loc = np.asarray(self.arrays["top_loc"])
        half = (self.arrays["top_window"].shape[2] - 1) // 2
        context = int(self.spec["context_size"])
        positions = loc[..., 1:2] + np.arange(-half, half + 1)
        valid = (loc[..., 0:1] >= 0) & (positions >= 0) & (positions < context)
        tokens = np.asarray(self.arrays["tokens"])
        gathered = tokens[np.clip(loc[..., 0:1], 0, None), np.clip(positions, 0, context - 1)]
        return np.where(valid, gathered, -1)

    def overview(self) -> dict[str, np.ndarray | list]:
        """Columns of the feature table: id, density, max and mean activation, top activating and top logit token."""
        top_ids = self.top_token_ids()
        logit_top = np.asarray(self.arrays["logit_top_ids"][:, 0])
        scores = np.full(self.d_sae, np.nan)
        for feature, entry in self.explanations.items():
            scores[feature] = entry.get("score", np.nan)
        return {"feature": np.arange(self.d_sae), "label": self.labels, "density": self.density,
                "max_activation": self.max_activation, "mean_activation": np.asarray(self.arrays["mean_act"]),
                "top_token": [self.token_text(int(t)) if t >= 0 else "" for t in top_ids],
                "top_logit": [self.token_text(int(t)) for t in logit_top], "explanation_score": scores}

    @cached_property
    def labels(self) -> list[str]:
        """Every feature's deterministic label (labels.json when the build wrote it, else computed)."""
        from interpscope.sae.store.labels import LABELS_FILE, compute_labels

        path = self.folder / LABELS_FILE
        if path.is_file():
            stored = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(stored, list) and len(stored) == self.d_sae:
                return [str(label) for label in stored]
        return compute_labels(self.arrays, self.vocab)

    @cached_property
    def explanations(self) -> dict[int, dict]:
        """Explanations written by a bundled model and their detection scores, by feature (empty when none)."""
        from interpscope.sae.store.explanations import read_explanations

        return read_explanations(self.folder)

    @cached_property
    def verification(self) -> dict | None:
        """The explanations' verification against their controls (None when not measured on the current ones)."""
        from interpscope.sae.store.verification import read_verification

        return read_verification(self)

    def explanation_entry(self, feature: int) -> dict | None:
        """A feature's explanation entry with its status (explanation_quality.status: only 'verified' is shown as an
        explanation) and, when tested, its verification (score, control, interval, scorer)."""
        entry = self.explanations.get(feature)
        if entry is None:
            return None
        from interpscope.sae.store.explanation_quality import status
        from interpscope.sae.store.verification import verified_features

        row = verified_features(self.verification).get(feature)
        out = {**entry, "status": status(entry, row)}
        if row is not None and self.verification is not None:
            out["verification"] = {**row, "scorer": self.verification.get("scorer"),
                                   "controls": self.verification.get("controls")}
        return out

    def token_text(self, token_id: int) -> str:
        return self.vocab[token_id] if 0 <= token_id < len(self.vocab) else ""

    # --- one feature ---------------------------------------------------------------------------------------
    def _context(self, seq: int, pos: int, window: np.ndarray) -> Context:
        half = (len(window) - 1) // 2
        context = int(self.spec["context_size"])
        first, last = max(0, pos - half), min(context - 1, pos + half)
        ids = self.arrays["tokens"][seq, first:last + 1]
        values = window[first - (pos - half): last - (pos - half) + 1].astype(np.float32)
        acts = [None if np.isnan(v) else float(f"{float(v):.4g}") for v in values]
        return Context(tokens=[self.token_text(int(t)) for t in ids], activations=acts,
                       max=max((a for a in acts if a is not None), default=0.0), centre=pos - first,
                       sequence=int(seq), position=int(pos))

    def card(self, feature: int) -> FeatureCard:
        """The feature card of one feature (reads only its rows)."""
        i = self.check_id(feature)
        a = self.arrays
        top_loc, top_win = np.asarray(a["top_loc"][i]), np.asarray(a["top_window"][i])
        contexts = [self._context(int(s), int(p), top_win[k]) for k, (s, p) in enumerate(top_loc) if s >= 0]
        for ctx, value in zip(contexts, np.asarray(a["top_act"][i]), strict=False):
            ctx.max = float(value)
        max_act = float(a["max_act"][i])
        n_int = int(self.spec["n_intervals"])
        int_loc, int_act = np.asarray(a["int_loc"][i]), np.asarray(a["int_act"][i])
        int_win = np.asarray(a["int_window"][i])
        intervals = []
        for j in range(n_int):
            examples = []
            for k, (s, p) in enumerate(int_loc[j]):
                if s >= 0:
                    ctx = self._context(int(s), int(p), int_win[j, k])
                    ctx.max = float(int_act[j, k])
                    examples.append(ctx)
            intervals.append(Interval(low=max_act * j / n_int, high=max_act * (j + 1) / n_int, examples=examples))

        def logits(ids_name: str, vals_name: str) -> list[TokenWeight]:
            return [TokenWeight(self.token_text(int(t)), round(float(v), 5))
                    for t, v in zip(a[ids_name][i], a[vals_name][i], strict=True)]

        return FeatureCard(
            id=i, density=float(self.density[i]), fire_count=int(a["fire_count"][i]), max_activation=max_act,
            mean_activation=float(a["mean_act"][i]), top_contexts=contexts, intervals=intervals,
            histogram=_histogram(0.0, max_act, a["hist_counts"][i]),
            top_logits=logits("logit_top_ids", "logit_top_vals"),
            bottom_logits=logits("logit_bottom_ids", "logit_bottom_vals"),
            logit_histogram=_histogram(float(a["logit_range"][i][0]), float(a["logit_range"][i][1]),
                                       a["logit_hist_counts"][i]),
            neighbours=[Neighbour(int(n), round(float(c), 5))
                        for n, c in zip(a["neighbour_ids"][i], a["neighbour_cos"][i], strict=True)],
            n_tokens=self.n_counted, label=self.labels[i], explanation=self.explanation_entry(i),
            store={"name": self.name, "sae": self.spec["sae_path"], "model": self.spec["model_name"],
                   "hook": self.spec["hook_name"], "corpus": self.spec["corpus"]})
