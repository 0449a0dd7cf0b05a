"""Explanations against their random-explanation controls (issue 42): a planted good explanation is verified, a
planted random one is not, the counts per store come from the verification, a stale verification counts as none,
and the embedding scorer is the model's own mean-pooled hidden state."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from interpscope.sae.store import explain
from interpscope.sae.store.explanation_quality import explanation_summary, status
from interpscope.sae.store.explanations import EXPLANATIONS_FILE, read_explanations
from interpscope.sae.store.verification import (
    EmbeddingScorer,
    lexical_scorer,
    read_verification,
    verified_features,
    verify,
    verify_store,
    write_verification,
)

CAT = ["the cat sat on the mat", "a black cat ran home", "my cat sleeps all day", "cats and their owners",
       "she fed the cat", "the cat purred", "a cat in the garden", "two cats played", "the old cat", "cat food"]
DOG = ["the dog barked", "a dog ran home", "my dog sleeps", "dogs and owners", "she fed the dog",
       "the dog growled", "a dog in the park", "two dogs played", "the old dog", "dog food"]
OTHER = ["rain fell all day", "a red car passed", "she read a book", "the river was high", "music filled the hall",
         "he paid the bill", "snow on the hills", "the train was late", "a letter arrived", "bread and butter"]


def test_verify_separates_a_planted_good_explanation_from_a_random_one():
    controls = [lexical_scorer(t, CAT + OTHER) for t in ("weather", "money", "music", "travel", "letters")]
    split = [(c[:10], c[10:]) for c in controls]
    good = lexical_scorer("cats", CAT + OTHER)
    random = lexical_scorer("the river", CAT + OTHER)
    verdict = verify((good[:10], good[10:]), split)
    assert verdict["score"] == 1.0 and verdict["verified"] and verdict["low"] > 0
    assert not verify((random[:10], random[10:]), split)["verified"]


class FakeStore:
    """What verify_store and explanation_summary read: a folder with explanations.jsonl."""

    def __init__(self, folder: Path, entries: list[dict]):
        self.folder = folder
        (folder / EXPLANATIONS_FILE).write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
        self.explanations = read_explanations(folder)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """Feature 0 fires on cats, 1 on dogs; 0's explanation names cats (good), 1's is another topic (random); 2-6
    are other features whose explanations serve as controls."""
    entries = [{"feature": 0, "explanation": "cats", "score": 1.0},
               {"feature": 1, "explanation": "trains and travel", "score": 0.5},
               {"feature": 2, "explanation": "weather", "score": 0.5},
               {"feature": 3, "explanation": "money", "score": 0.5},
               {"feature": 4, "explanation": "music", "score": 0.5},
               {"feature": 5, "explanation": "letters", "score": 0.5},
               {"feature": 6, "explanation": "rivers", "score": 0.5},
               {"feature": 7, "explanation": "The marked words are:", "score": 0.5}]
    store = FakeStore(tmp_path, entries)
    positives = {0: CAT, 1: DOG}
    monkeypatch.setattr(explain, "held_out_positives", lambda s, f: positives.get(f, []))
    texts = OTHER
    peak = np.zeros((len(texts), 8))
    return store, (texts, peak)


def test_store_verification_counts_and_status(planted):
    store, pool = planted
    document = verify_store(store, pool, features=[0, 1, 7], n_boot=500)
    assert document["tested"] == 2 and document["verified"] == 1
    assert document["skipped"]["degenerate"] == [7]
    write_verification(store, document)
    rows = verified_features(read_verification(store))
    assert rows[0]["verified"] and not rows[1]["verified"]
    assert rows[0]["score"] == 1.0 and rows[1]["score"] <= 0.5  # "trains" matches one negative: 0.45
    entries = store.explanations
    assert status(entries[0], rows.get(0)) == "verified"
    assert status(entries[1], rows.get(1)) == "not verified"
    assert status(entries[7], rows.get(7)) == "degenerate"
    assert status(entries[2], rows.get(2)) == "unverified"  # not tested
    summary = explanation_summary(store)
    assert (summary["written"], summary["verified"], summary["not_verified"], summary["degenerate"],
            summary["unverified"]) == (8, 1, 1, 1, 5)
    assert summary["verification"]["scorer"] == "lexical" and summary["verification"]["controls"] == 5


def test_a_verification_of_other_explanations_counts_as_none(planted):
    store, pool = planted
    write_verification(store, verify_store(store, pool, features=[0], n_boot=200))
    assert read_verification(store) is not None
    with (store.folder / EXPLANATIONS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"feature": 9, "explanation": "dogs", "score": 1.0}) + "\n")
    store.explanations = read_explanations(store.folder)
    assert read_verification(store) is None
    summary = explanation_summary(store)
    assert summary["verified"] == 0 and summary["verification"] is None


def test_embedding_scorer_is_the_models_mean_pooled_state():
    from tests.sae_store_tiny import tiny_lm

    scorer = EmbeddingScorer(tiny_lm(seed=1), layer=1)
    scores = scorer("a black cat", ["a black cat", "rain fell all day"])
    assert scores[0] == pytest.approx(1.0, abs=1e-5) and scores[1] < scores[0]
    assert len(scorer.cache) == 2  # the explanation's text is the first context's: embedded once
