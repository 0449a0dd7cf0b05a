"""The graph's ablation check over a set of prompts (45.15): each prompt's row is that prompt's own check, the means
are those rows' with a bootstrap interval, the CLI writes the same document, and misuse is refused before any work."""
from __future__ import annotations

import json

import numpy as np
import pytest

from interpscope.cli import main
from interpscope.graphs.build import build_graph
from interpscope.graphs.check_set import ablation_check_set
from interpscope.graphs.interventions import ablation_check
from interpscope.results import without_timings

TEXTS = ["The quick brown fox jumps over the", "When Mary and John went to the store, John gave a drink to",
         "The capital of France is"]
OPTIONS = dict(node_budget=20, edge_budget=60, max_feature_nodes=20, lrp=None)


def test_each_row_is_its_prompts_own_check_and_the_means_are_theirs(folders):
    lm, _, _ = folders
    from interpscope.sae.transcoder_set import random_transcoder_set

    tset = random_transcoder_set(lm, 40, seed=1)
    seen = []
    result = ablation_check_set(lm, tset, TEXTS, n=4, graph_options=OPTIONS, progress=lambda *a: seen.append(a))
    assert seen == [(1, 3), (2, 3), (3, 3)] and len(result.rows) == 3
    for text, row in zip(TEXTS, result.rows, strict=True):
        alone = ablation_check(lm, tset, build_graph(lm, tset, text, **OPTIONS), n=4, seed=0)
        assert row["text"] == text and row["r"] == pytest.approx(alone.r) and row["ablations"] == 4
        assert row["r_control"] == pytest.approx(alone.r_control)
    rs = [row["r"] for row in result.rows if row["r"] is not None]
    assert result.means["r"]["mean"] == pytest.approx(np.mean(rs)) and result.means["r"]["n"] == len(rs)
    assert result.means["r"]["low"] <= result.means["r"]["mean"] <= result.means["r"]["high"]
    sentence = result.summary()
    assert f"Over {len(rs)} prompts" in sentence and "random active features" in sentence
    assert f"met on {result.n_met()} of {len(rs)}" in sentence
    # pooled over every prompt's strongest ablations: the graphs' r beside the frozen-convention ceiling
    from interpscope.graphs.interventions import pearson

    changes = [c for row in result.rows for c in row["changes"]]
    assert len(changes) == result.pooled["n"] == sum(row["ablations"] for row in result.rows)
    for name, key in (("r", "predicted"), ("r_frozen_linear", "predicted_frozen_linear"),
                      ("r_real_linear", "predicted_real_linear")):
        assert result.pooled[name] == pytest.approx(pearson([c[key] for c in changes],
                                                            [c["actual"] for c in changes]))
    assert f"graphs reach r = {result.pooled['r']:.2f}" in sentence
    assert f"reaches r = {result.pooled['r_frozen_linear']:.2f}" in sentence
    assert all("changes" not in row for row in result.tidy())


def test_the_cli_writes_the_same_document_and_refuses_misuse(folders, tmp_path, capsys):
    lm, model_dir, set_dir = folders
    texts = tmp_path / "prompts.txt"
    texts.write_text("\n".join(TEXTS[:2]) + "\n", encoding="utf-8")
    out = tmp_path / "check.json"
    base = ["graphs", "--model", str(model_dir), "--device", "cpu", "--dtype", "float64", "--transcoders",
            str(set_dir), "--node-budget", "20", "--edge-budget", "60", "--max-feature-nodes", "20"]
    code = main([*base, "--texts", str(texts), "--ablation-check", "4", "--check-json", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    document = json.loads(out.read_text())
    assert document["schema"] == "interpscope.graph.ablation_check_set" and len(document["rows"]) == 2
    from interpscope.sae.transcoder_set import load_transcoder_set

    api = ablation_check_set(lm, load_transcoder_set(set_dir, lm=lm), TEXTS[:2], n=4,
                             graph_options=dict(OPTIONS, lrp=None))
    assert without_timings(document) == without_timings(api.to_dict())
    for argv, message in [(["--texts", str(texts), "--check-json", str(out)], "give --ablation-check N"),
                          (["--texts", str(texts), "--ablation-check", "4"], "needs --check-json"),
                          (["--texts", str(texts), "--ablation-check", "4", "--check-json", "-", "--json", "x.json"],
                           "not --json"),
                          (["--texts", str(texts), "--text", "a", "--ablation-check", "4", "--check-json", "-"],
                           "takes no --text"),
                          ([], "Give --text")]:
        code = main([*base, *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)
