"""Feature explanations: detection scoring on a planted feature whose explanation is known, resumable writing into
the store, and (bundled) the real explainer writing explanations the browser can search."""
from __future__ import annotations

import json

import numpy as np
import pytest

from interpscope.sae.store import FeatureStore, build_store
from interpscope.sae.store.explain import balanced_accuracy, explain_store, negative_pool, writer_prompt
from tests.sae_store_tiny import isolated_data, random_sae_folder, tiny_lm

CAT = ["the [[cat]] sat on the mat", "a black cat ran", "my cat sleeps", "cats and dogs"]
OTHER = ["the dog barked", "rain fell all day", "a red car", "she read a book"]


def test_detection_scores_a_known_explanation_perfectly_and_a_wrong_one_at_chance():
    assert balanced_accuracy("cats", CAT, OTHER) == 1.0
    assert balanced_accuracy("the word cat", CAT, OTHER) == 1.0
    assert balanced_accuracy("weather", CAT, OTHER) == 0.5
    assert balanced_accuracy("cats and rain", CAT, OTHER) == 0.875
    assert balanced_accuracy("cat", CAT, []) is None


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    monkeypatch = isolated_data(root)
    lm = tiny_lm(seed=6)
    sae = random_sae_folder(lm, root / "sae", d_sae=24)
    folder = build_store(lm, sae, n_tokens=2048, context_size=64, batch_size=4, eval_tokens=0)
    yield lm, FeatureStore(folder)
    monkeypatch.undo()


def test_explanations_are_written_scored_resumed_and_searchable(store):
    lm, feature_store = store
    pool = negative_pool(lm, feature_store.load_sae(), feature_store)
    alive = [f for f in range(feature_store.d_sae) if feature_store.arrays["fire_count"][f] > 0][:6]

    def planted_writer(prompts: list[str]) -> list[str]:
        """Names the marked token of the first context: what a perfect explainer would say."""
        return [p.split("[[", 1)[1].split("]]", 1)[0].strip() for p in prompts]
    planted_writer.name = "planted"

    stops = []
    first = explain_store(feature_store, planted_writer, pool, features=alive, batch_size=2,
                          should_stop=lambda: stops.append(1) or len(stops) > 1)
    assert len(first) == 2  # stopped after one batch
    done = explain_store(FeatureStore(feature_store.folder), planted_writer, pool, features=alive, batch_size=2)
    assert sorted(done) == alive
    lines = [json.loads(line) for line in (feature_store.folder / "explanations.jsonl").read_text().splitlines()]
    assert sorted(e["feature"] for e in lines) == alive  # each written once
    for entry in done.values():
        assert entry["writer"] == "planted" and entry["positives"] > 0
        assert (entry["score"] is None) == (entry["negatives"] == 0)  # no score without both kinds of context
        assert entry["score"] is None or 0.0 <= entry["score"] <= 1.0
    assert any(entry["score"] is not None for entry in done.values())
    fresh = FeatureStore(feature_store.folder)
    card = fresh.card(alive[0])
    assert card.explanation["explanation"] == done[alive[0]]["explanation"]
    from interpscope.sae.store.search import search

    word = next(e["explanation"] for e in done.values() if len(e["explanation"].strip()) >= 3).strip()
    assert any(row["feature"] in alive for row in search(fresh, word, "label"))
    assert np.isfinite(fresh.overview()["explanation_score"][alive]).any()


def test_the_writer_is_shown_a_features_strongest_contexts(store):
    _, feature_store = store
    alive = int(np.flatnonzero(np.asarray(feature_store.arrays["fire_count"]) > 0)[0])
    prompt = writer_prompt(feature_store, alive)
    assert prompt.count("[[") >= 1 and "What do the marked words have in common?" in prompt
    dead = np.flatnonzero(np.asarray(feature_store.arrays["fire_count"]) == 0)
    if dead.size:
        assert writer_prompt(feature_store, int(dead[0])) is None


@pytest.mark.bundled
def test_the_bundled_instruction_model_writes_explanations(store, bundled_lm):
    from interpscope.sae.store.explain import model_writer

    answers = model_writer(bundled_lm)(["Here are snippets: 1. the [[cat]] sat 2. my [[cat]] ran\nWhat do the "
                                        "marked words have in common? Answer in at most six words."])
    assert len(answers) == 1 and answers[0].strip()
