"""The SAE bench (interpscope.sae.bench) on planted cases: an absorbed first-letter feature is caught, a planted
separable latent probes at ~1 with chance 0.5, a detection scorer separates right explanations from random ones
(a lexical judge, and the bundled LM on clear cases); the CLI's document is the API's and the page's; bad input
exits 2."""
from __future__ import annotations

import json
import pickle
import string
from pathlib import Path

import numpy as np
import pytest
import torch

from interpscope.cli import main
from interpscope.results import without_timings
from interpscope.sae.bench.absorption import DEFAULTS, letter_absorption
from interpscope.sae.bench.common import Encoder, auroc, few_threads, median_accuracy, random_encoder
from interpscope.sae.bench.probing import probing_tasks
from interpscope.sae.bench.simulator import Query, lexical_judge, lm_judge, score_features

GATED = Path(__file__).resolve().parents[2] / "assets" / "saes" / "smollm2-135m-blocks.15-gated-4608"
A, B, S = (string.ascii_lowercase.index(c) for c in "abs")
D = 64


def planted_words(seed: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Activations x = letter direction + 0.6 * token direction + noise for words starting with a, b or s; s-words
    are 40 tokens, two of which ('sun' = token 0, 'sea' = token 1) are 4% of the s-words each."""
    rng = np.random.default_rng(seed)
    rows, letters, tokens = [], [], []
    for letter, dim in ((A, 0), (B, 1), (S, 2)):
        for _ in range(300 if letter != S else 500):
            token = int(rng.integers(2, 40)) if letter == S else int(rng.integers(40, 60))
            if letter == S and rng.random() < 0.08:
                token = int(rng.integers(0, 2))
            x = rng.normal(0, 0.05, D)
            x[dim] += 1.0
            x[3 + token] += 0.6
            rows.append(x)
            letters.append(letter)
            tokens.append(token)
    return torch.tensor(np.array(rows), dtype=torch.float32), np.array(letters), np.array(tokens)


def hand_made_sae(absorbing: bool) -> Encoder:
    """Latents 0-2: letters a, b, s. With `absorbing`, latent 2 is silent on 'sun' and 'sea' (tokens 0, 1), whose
    own latents 3 and 4 (decoder = s direction + token direction) carry the s instead; without it, latent 2 fires on
    every s-word and latents 3, 4 are plain token features."""
    W_dec = torch.zeros(5, D)
    for latent, dim in enumerate((0, 1, 2)):
        W_dec[latent, dim] = 1.0
    for latent, token in ((3, 0), (4, 1)):
        W_dec[latent, 2] = 1.0 if absorbing else 0.0
        W_dec[latent, 3 + token] = 1.0
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)

    def encode(x: torch.Tensor) -> torch.Tensor:
        f = torch.relu(x[:, :3] - 0.5)
        absorbed = (x[:, 3:5] > 0.3).any(1)
        if absorbing:
            f[:, 2] = torch.where(absorbed, torch.zeros_like(f[:, 2]), f[:, 2])
        return torch.cat([f, torch.relu(x[:, 3:5] - 0.3)], 1)
    return Encoder(encode, W_dec)


def test_a_planted_absorbed_feature_is_caught():
    x_train, y_train, _ = planted_words(0)
    x_test, y_test, tokens = planted_words(1)
    absorbed = letter_absorption(hand_made_sae(True), x_train, y_train, x_test, y_test, DEFAULTS)
    rows = {r["letter"]: r for r in absorbed["rows"]}
    assert set(rows) == {"a", "b", "s"}
    share = float(np.isin(tokens[y_test == S], [0, 1]).mean())
    assert 0.04 < share < 0.14
    assert rows["s"]["main_latents"] == [2] and not rows["s"]["split"]
    assert rows["s"]["absorption_rate"] == pytest.approx(share, abs=0.01)
    assert rows["a"]["absorption_rate"] == 0 and rows["b"]["absorption_rate"] == 0
    assert absorbed["probe_accuracy"] > 0.99
    clean = letter_absorption(hand_made_sae(False), x_train, y_train, x_test, y_test, DEFAULTS)
    assert all(r["absorption_rate"] == 0 for r in clean["rows"]) and clean["absorption_rate"] == 0
    control = random_encoder(D, 5, x_train, density=0.2)
    assert control.W_dec.shape == (5, D)
    assert 0.1 < float((control.encode(x_train) > 0).float().mean()) < 0.3


def test_a_planted_separable_latent_probes_at_one_beside_chance():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 40)
    is_test = np.tile(np.arange(40) >= 28, 3)
    noise = torch.tensor(rng.normal(0, 1, (120, 20)), dtype=torch.float32)
    latents = noise.clone()
    for c in range(3):
        latents[:, 5 + c] = torch.tensor((labels == c) * 3.0 + rng.normal(0, 0.3, 120), dtype=torch.float32)
    rows = probing_tasks(noise, latents, noise, labels, is_test, ["x", "y", "z"])
    for row in rows:
        assert row["sae_top_1"] >= 0.95
        assert row["chance"] == 0.5 and row["test"] == 24
        assert row["random_top_1"] < 0.8 and row["full_activations"] < 0.85


def test_auroc_and_median_accuracy():
    assert auroc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert auroc(np.array([1.0]), np.array([1.0])) == 0.5
    assert auroc(np.array([]), np.array([1.0])) is None
    assert median_accuracy(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert median_accuracy(np.ones(3), np.ones(3)) == 0.5


ANIMALS = {"cat": ["the cat sat on the mat", "a grey cat slept", "her cat purred softly"],
           "dog": ["the dog barked loudly", "a dog ran home", "his dog fetched the stick"],
           "rain": ["heavy rain fell all night", "the rain stopped at noon", "cold rain on the window"]}
ELSE = ["she wrote a long letter", "they dined at eight", "the carriage arrived late"]


def shared_for(explanations: list[str]) -> tuple[dict, list]:
    shared = {"features": [0, 1, 2], "explanations": explanations, "sources": ["planted"] * 3, "partner": [1, 2, 0]}
    examples = [([Query("", t) for t in ANIMALS[name]], [Query("", t) for t in ELSE]) for name in ANIMALS]
    return shared, examples


def test_detection_separates_a_right_explanation_from_a_random_one_with_a_lexical_judge():
    shared, examples = shared_for(["the word cat", "the word dog", "the word rain"])
    rows, measures = score_features(lexical_judge, shared, examples, lambda f, t: None, "detection")
    auroc_measure = measures[0]
    assert auroc_measure.value == 1.0 and auroc_measure.control == 0.5
    assert all(r["accuracy"] == 1.0 and r["random_accuracy"] == 0.5 for r in rows)
    assert "better than" in auroc_measure.sentence()


def test_the_bundled_lm_judge_prefers_the_right_explanation(bundled_lm):
    shared, examples = shared_for(["cats (the animal)", "dogs (the animal)", "rain and wet weather"])
    with few_threads(1):  # small batches: one thread is several times faster on a busy machine
        rows, measures = score_features(lm_judge(bundled_lm, batch_size=18), shared, examples, lambda f, t: None,
                                        "detection")
    assert measures[0].value > measures[0].control + 0.1, rows


def test_cli_document_is_the_api_document(tmp_path, capsys, bundled_lm):
    from interpscope.sae.bench import bench_sae

    out = tmp_path / "bench.json"
    code = main(["sae", "bench", "--sae", str(GATED), "--metrics", "probing", "--passages", "6", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    document = json.loads(out.read_text())
    api = bench_sae(bundled_lm, GATED, metric_names="probing",
                    options={"probing": {"per_novel": 6, "per_novel_test": 3}}).to_dict()
    assert without_timings(document) == without_timings(api)
    assert document["schema"] == "interpscope.sae_bench" and document["schema_version"] == 2
    measures = {m["name"]: m for m in document["metrics"]["probing"]["measures"]}
    assert measures["all-activation probe accuracy"]["control"] == 0.5


def test_the_shipped_result_is_the_page_export(exports):
    from interpscope.sae.bench import from_dict
    from tests.apptest_util import open_page

    shipped = json.loads((GATED.parent.parent / "sae_bench" / f"{GATED.name}.json").read_text())
    assert from_dict(shipped).to_dict() == shipped
    at = open_page("pages/sae_overview.py")
    assert not at.exception
    assert exports["sae-bench"] == shipped
    assert any("Absorption" in m.value for m in at.markdown)


@pytest.mark.parametrize("make", ["empty", "pickle", "metric"])
def test_cli_bad_input_exits_2(tmp_path, capsys, make):
    folder = tmp_path / "sae"
    folder.mkdir()
    args = ["sae", "bench", "--sae", str(folder)]
    if make == "pickle":
        (folder / "sae.pt").write_bytes(pickle.dumps({"W_enc": 1}))
        args = ["sae", "bench", "--sae", str(folder / "sae.pt")]
    if make == "metric":
        args = ["sae", "bench", "--sae", str(GATED), "--metrics", "absorption,nonsense"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1
    assert {"empty": "not an SAE folder", "pickle": "pickle", "metric": "nonsense"}[make] in err


def test_a_mean_over_few_features_carries_its_bootstrap_interval_and_says_when_it_does_not_resolve():
    """45.14: a bench AUROC of 0.542 over six features stood as bare as if it were exact."""
    from interpscope.sae.bench.simulator import feature_measure

    rows = [{"auroc": a, "random_auroc": r} for a, r in
            ((0.9, 0.5), (0.4, 0.6), (0.7, 0.45), (0.5, 0.55), (0.6, 0.5), (0.3, 0.4))]
    measure = feature_measure(rows, "AUROC", "auroc")
    assert measure.value == pytest.approx(0.5667, abs=1e-4) and measure.over == "6 features"
    assert measure.low < measure.value < measure.high and measure.control_low < measure.control < measure.control_high
    assert "not distinguishable on this sample from" in measure.sentence() and "over 6 features" in measure.sentence()
    clear = feature_measure([{"auroc": 0.95 + i / 1000, "random_auroc": 0.5 + i / 1000} for i in range(8)],
                            "AUROC", "auroc")
    assert "better than" in clear.sentence()
    one = feature_measure([{"auroc": 0.8, "random_auroc": 0.5}], "AUROC", "auroc")
    assert one.low is None and one.over is None and "[" not in one.sentence()  # no interval from one feature


def test_the_per_feature_lexical_score_has_its_own_name_and_an_interval():
    """45.14: per-feature 'detection scores' of 1.00 stood beside a bench 'detection' AUROC of 0.542: two numbers,
    one name, no interval."""
    from interpscope.sae.store.explanations import SCORE_DIFFERENCE, SCORE_NAME, score_interval, score_text

    low, high = score_interval({"score": 1.0, "positives": 10, "negatives": 10})
    assert high == 1.0 and 0.8 < low < 0.87  # Wilson, 20 of 20
    low, high = score_interval({"score": 0.5, "positives": 10, "negatives": 10})
    assert low < 0.3 and high > 0.7  # chance is inside a 10 + 10 score of 0.5
    assert score_interval({"score": None}) is None and score_interval({"score": 0.7}) is None
    text = score_text({"score": 1.0, "positives": 10, "negatives": 10})
    assert text.startswith(f"{SCORE_NAME} 1.00 [0.8") and "10 + 10 held-out contexts" in text
    assert "detection" not in SCORE_NAME and "AUROC" in SCORE_DIFFERENCE
