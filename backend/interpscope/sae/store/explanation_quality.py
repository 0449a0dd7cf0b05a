"""Which written explanations say something: degenerate answers and the chance score of the detection scorer.

- Degenerate: an answer with no content word of its own once the writer's instructions are taken out (the scorer's
  own word rule, explain._words, minus the words of explain.PROMPT_HEAD/PROMPT_TAIL). "The marked words are:" and
  "a hidden unit of a language model is active" copy the question; the lexical simulator could only match a
  context by accident.
- Chance score: what an explanation unrelated to the feature scores by the same detection scorer: for sampled live
  features, the explanation written for another random feature, scored on this feature's held-out positives and
  its negatives from the same pool (explain.negative_pool). The chance score is the 95th percentile of those
  scores: an explanation scoring at or below it does no better than one in twenty unrelated explanations would by
  luck (the mean is kept too: a random explanation averages just under 0.5). A context-blind predictor's balanced
  accuracy is 0.5 exactly, the figure used when a store has no measured chance score (or one measured on other
  explanations).
- Verified (issue 42, interpscope.sae.store.verification): an explanation beats its own random-explanation control
  on its feature's contexts, by a paired-bootstrap interval above 0. Only a verified explanation is shown as an
  explanation; `status` gives each feature's: none, degenerate, verified, not verified (tested, its lead's interval
  reaches 0) or unverified (not tested: no verification measured on the current explanations, or no contexts).
- explanation_summary: the one place the counts come from (written, scored, degenerate, verified, not verified,
  unverified; and the older at-or-below-chance count), for the feature browser and the README.

The measured chance score is kept in the store folder as explanation_chance.json with the SHA-256 of the
explanations file it was measured on (scripts/explanation_chance.py writes it).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from interpscope import atomic
from interpscope.outputs import OutputFolder
from interpscope.sae.store.explain import balanced_accuracy, held_out_positives
from interpscope.sae.store.explanations import EXPLANATIONS_FILE
from interpscope.sae.store.wording import INSTRUCTION_WORDS, content_words, is_degenerate  # noqa: F401

CHANCE_FILE = "explanation_chance.json"
CONTEXT_BLIND = 0.5


def _explanations_digest(folder: Path) -> str | None:
    path = Path(folder) / EXPLANATIONS_FILE
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def measure_chance(store, pool: tuple[list[str], np.ndarray], n_features: int = 400, seed: int = 0) -> dict:
    """The detection score of a random other feature's explanation, over up to n_features sampled live features
    with held-out positives: {"mean", "p95", "n", "explanations_sha256"}."""
    texts, peak = pool
    entries = store.explanations
    written = sorted(entries)
    rng = np.random.default_rng(seed)
    candidates = [f for f in written if entries[f].get("score") is not None]
    picked = rng.permutation(candidates)[:n_features]
    scores = []
    for feature in picked:
        positives = held_out_positives(store, int(feature))
        negatives = [t for t, v in zip(texts, peak[:, int(feature)], strict=True) if v <= 0][:len(positives) or 10]
        other = int(rng.choice([f for f in written if f != feature]))
        score = balanced_accuracy(entries[other].get("explanation", ""), positives, negatives)
        if score is not None:
            scores.append(score)
    if not scores:
        return {"mean": CONTEXT_BLIND, "p95": CONTEXT_BLIND, "n": 0, "explanations_sha256": None}
    return {"mean": float(np.mean(scores)), "p95": float(np.percentile(scores, 95)), "n": len(scores),
            "explanations_sha256": _explanations_digest(store.folder)}


def write_chance(store, chance: dict) -> Path:
    """Keep a measured chance score beside the explanations it was measured on (recorded in the folder's marker)."""
    owned = OutputFolder.claim(store.folder, force=True, command="explanation chance")
    path = Path(store.folder) / CHANCE_FILE
    atomic.write_json(path, chance)
    owned.record(CHANCE_FILE)
    return path


def chance_score(store) -> dict:
    """The store's chance score {"threshold", "source", ...}: the measured 95th percentile when it was measured on
    the current explanations, else the context-blind 0.5."""
    path = Path(store.folder) / CHANCE_FILE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("explanations_sha256") == _explanations_digest(store.folder) and saved.get("n"):
            return {**saved, "threshold": float(saved["p95"]),
                    "source": f"95th percentile of {saved['n']} unrelated explanations' scores; their mean "
                              f"{saved['mean']:.3f}"}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    return {"threshold": CONTEXT_BLIND, "source": "a context-blind guess (balanced accuracy 0.5)"}


def quality(entry: dict | None, chance: float) -> str:
    """'none', 'degenerate', 'unscored', 'at or below chance' or 'ok' for one feature's explanation entry."""
    if not entry:
        return "none"
    if is_degenerate(entry.get("explanation", "")):
        return "degenerate"
    score = entry.get("score")
    if score is None:
        return "unscored"
    return "at or below chance" if score <= chance else "ok"


def status(entry: dict | None, row: dict | None) -> str:
    """'none', 'degenerate', 'verified', 'not verified' or 'unverified' for one feature's explanation entry and its
    verification row (interpscope.sae.store.verification.verified_features; None: not tested)."""
    if not entry:
        return "none"
    if is_degenerate(entry.get("explanation", "")):
        return "degenerate"
    if row is None:
        return "unverified"
    return "verified" if row["verified"] else "not verified"


def explanation_summary(store) -> dict:
    """Counts over a store's explanations: written, scored, degenerate, verified, not verified, unverified (and the
    older at-or-below-chance count, ok); the verification's scorer and controls, and the chance."""
    from interpscope.sae.store.verification import read_verification, verified_features

    chance = chance_score(store)
    counts = {"none": 0, "degenerate": 0, "unscored": 0, "at or below chance": 0, "ok": 0}
    for entry in store.explanations.values():
        counts[quality(entry, chance["threshold"])] += 1
    written = len(store.explanations)
    scored = sum(e.get("score") is not None for e in store.explanations.values())
    document = read_verification(store)
    rows = verified_features(document)
    states = {"verified": 0, "not verified": 0, "unverified": 0, "degenerate": 0, "none": 0}
    for feature, entry in store.explanations.items():
        states[status(entry, rows.get(feature))] += 1
    verification = None if document is None else {
        "scorer": document.get("scorer"), "controls": document.get("controls"), "tested": document.get("tested"),
        "bootstrap": document.get("bootstrap"), "comparison": document.get("comparison") or {}}
    return {"written": written, "scored": scored, "degenerate": counts["degenerate"],
            "at_or_below_chance": counts["at or below chance"], "unscored": counts["unscored"], "ok": counts["ok"],
            "verified": states["verified"], "not_verified": states["not verified"],
            "unverified": states["unverified"], "verification": verification, "chance": chance}
