"""Whole-file attribution: row by row, resumable, stoppable, aggregated exactly as the rows say."""
from __future__ import annotations

import json

import numpy as np
import pytest

from interpscope.config import InterpscopeError
from interpscope.relevance.api import explain
from interpscope.relevance.file_attribution import OLD_ROW_REASON, excluded_reasons, explain_file
from interpscope.uploads import parse_table
from tests.sae_store_tiny import tiny_lm

CSV = (b"text,label\nThe capital of France is,geo\nShe smiled at him and,social\nParis is a city in,geo\n"
       b"He bowed to her and,social\n")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(seed=3)


def test_rows_equal_single_explanations_and_aggregates_match_a_hand_computation(lm, tmp_path):
    table = parse_table(CSV, "rows.csv")
    run = explain_file(lm, table, CSV, "gradxinput", folder=tmp_path / "run")
    assert run.complete and len(run.rows) == 4 and not run.errors
    for row in run.rows:
        single = explain(lm, table.examples[row["row"]], "gradxinput")
        np.testing.assert_allclose(row["relevance"], single.relevance, rtol=1e-6, atol=1e-9)
        assert row["label"] == table.labels[row["row"]] and row["sinks"] == single.sink_positions
        assert row["excluded"] == single.sinks and excluded_reasons(row) == single.sink_reasons()
    tidy = run.tidy()
    assert len(tidy) == sum(len(r["tokens"]) for r in run.rows)
    # every excluded position says why, as the relevance page does (GPT-2 adds no BOS: the default prepends it)
    for entry in tidy:
        assert bool(entry["excluded_reason"]) == entry["sink"]
        if entry["position"] == 0:
            assert entry["token"] == "<|endoftext|>" and entry["excluded_reason"].startswith("prepended BOS")
    older = {"sinks": [0, 3], "excluded": [{"position": 0, "reason": "prepended BOS"}]}  # a row from an older run
    assert excluded_reasons(older) == {0: "prepended BOS", 3: OLD_ROW_REASON}
    everything = run.aggregates(top=1000)
    for entry in everything.by_token:  # mean per token type over non-sink positions, by hand
        values = [v for r in run.rows for i, (t, v) in enumerate(zip(r["tokens"], r["relevance"], strict=True))
                  if t == entry["token"] and i not in r["sinks"]]
        assert entry["count"] == len(values) and entry["mean_relevance"] == pytest.approx(np.mean(values))
    last = next(d for d in everything.by_distance if d["distance"] == 0)
    assert last["mean_relevance"] == pytest.approx(np.mean([r["relevance"][-1] for r in run.rows]))
    assert set(everything.by_label) == {"geo", "social"} and everything.by_label["geo"]["rows"] == 2


def test_a_stopped_run_resumes_to_the_same_rows_and_other_settings_are_refused(lm, tmp_path):
    table = parse_table(CSV, "rows.csv")
    calls = []
    partial = explain_file(lm, table, CSV, "gradxinput", folder=tmp_path / "run",
                           should_stop=lambda: calls.append(1) or len(calls) > 2)
    assert not partial.complete and len(partial.rows) == 2
    resumed = explain_file(lm, table, CSV, "gradxinput", folder=tmp_path / "run")
    fresh = explain_file(lm, table, CSV, "gradxinput", folder=tmp_path / "fresh")
    assert resumed.complete and [r["relevance"] for r in resumed.rows] == [r["relevance"] for r in fresh.rows]
    lines = (tmp_path / "run" / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line)["row"] for line in lines] == [0, 1, 2, 3]
    with pytest.raises(InterpscopeError, match="method"):
        explain_file(lm, table, CSV, "attnlrp", folder=tmp_path / "run")
    redone = explain_file(lm, table, CSV, "attnlrp", folder=tmp_path / "run", force=True)
    assert redone.complete and redone.spec.method == "attnlrp"


def test_a_row_the_model_cannot_take_is_counted_not_skipped(lm, tmp_path):
    data = b"Short one\n" + b"word " * 2000 + b"\nAnother short\n"
    table = parse_table(data, "rows.txt")
    run = explain_file(lm, table, data, "gradxinput", folder=tmp_path / "run")
    assert run.complete and [r["row"] for r in run.rows] == [0, 2]
    assert len(run.errors) == 1 and "tokens long" in run.errors[0]["error"]


def test_cli_all_rows_writes_rows_aggregates_table_and_figures(tmp_path, capsys):
    """`interpscope explain --all-rows` run in this process (main(), as the console entry point calls it)."""
    from interpscope.cli import main
    from tests.sae_store_tiny import save_tiny_lm

    model = save_tiny_lm(tmp_path / "model", seed=3)
    rows = tmp_path / "rows.csv"
    rows.write_bytes(CSV)
    out = tmp_path / "out"
    command = ["explain", "--model", str(model), "--file", str(rows), "--all-rows", "--out", str(out), "--method",
               "occlusion", "--occlusion-window", "2"]
    code = main(command)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Label column: 'label'" in err
    aggregates = json.loads((out / "aggregates.json").read_text())
    assert set(aggregates["by_label"]) == {"geo", "social"}
    import pandas as pd

    table = pd.read_csv(out / "relevance.csv")
    assert list(table.columns[:5]) == ["row", "position", "token", "relevance", "target"]
    assert sorted(table["row"].unique()) == [0, 1, 2, 3]
    firsts = table[table["position"] == 0]
    assert firsts["excluded_reason"].str.startswith("prepended BOS").all()  # the reason, not just "excluded"
    assert (table["excluded_reason"].fillna("") != "").eq(table["sink"]).all()
    logged = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert all(row["excluded"][0]["reason"].startswith("prepended BOS") for row in logged)
    assert (out / "by_token.png").read_bytes()[:4] == b"\x89PNG"
    assert main(command[:-4] + ["--method", "gradxinput"]) == 2  # a message and exit 2, not an exception
    err = capsys.readouterr().err
    assert "method: occlusion in the folder, gradxinput now" in err and "Traceback" not in err


def test_the_relevance_page_explains_a_whole_uploaded_file(tmp_path, monkeypatch):
    from tests.apptest_util import open_page
    from tests.sae_store_tiny import save_tiny_lm

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    model = save_tiny_lm(tmp_path / "model", seed=3)
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(model))
    at.file_uploader(key="relevance-file-upload").set_value(("rows.csv", CSV, "text/csv")).run()
    at.selectbox(key="relevance-file-method").set_value("ig").run()
    at.number_input(key="relevance-file-ig-steps").set_value(4).run()
    at.button(key="relevance-file-run").click().run()
    assert not at.exception, at.exception
    assert any(m.value == "**4 of 4 rows explained**" for m in at.markdown)
    captions = " ".join(c.value for c in at.caption)
    assert "Label 'geo' (2 rows)" in captions and "Label 'social' (2 rows)" in captions
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Mean relevance per token type" in t for t in titles)
    assert any("Mean relevance by distance" in t for t in titles)
    assert len(list((tmp_path / "data" / "file_attribution").iterdir())) == 1  # saved, so a rerun resumes
    import html

    row_map = html.unescape(next(m.value for m in at.markdown if 'class="relevance-token"' in m.value))
    assert "position 0 '<|endoftext|>' (prepended BOS" in row_map  # the browsed row names why, as the page does
