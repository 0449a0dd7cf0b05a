"""Patching over a set of pairs (issue 45.15): the mean grid and its spread are those of the per-pair grids, pairs
that do not line up are refused before any run, the CLI, the API and the page give one document, and a bad pairs
file gets one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

import interpscope
from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.patching.attribution import pearson
from interpscope.patching.dataset import patch_set, read_pairs, shipped_pairs
from interpscope.patching.run import patch
from interpscope.results import without_timings
from tests.sae_store_tiny import save_tiny_lm

PAIRS = [{"clean": "When Mary and John went to the store, John gave a drink to",
          "corrupt": "When Mary and John went to the store, Mary gave a drink to", "answer": " Mary", "wrong": " John"},
         {"clean": "When Anna and Tom went to the beach, Tom gave a book to",
          "corrupt": "When Anna and Tom went to the beach, Anna gave a book to", "answer": " Anna", "wrong": " Tom"},
         {"clean": "After John and Mary went to the park, Mary gave a ball to",
          "corrupt": "After John and Mary went to the park, John gave a ball to", "answer": " John", "wrong": " Mary"}]
KINDS = "resid,attn"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save_tiny_lm(tmp_path_factory.mktemp("tiny") / "gpt2"))


@pytest.fixture(scope="module")
def lm(folder):
    return interpscope.load(folder, device="cpu")


@pytest.fixture(scope="module")
def result(lm):
    return patch_set(lm, PAIRS, components=KINDS)


def test_the_mean_grid_and_its_spread_are_those_of_the_pairs(lm, result):
    singles = [patch(lm, p["clean"], p["corrupt"], answer=p.get("answer"), wrong=p.get("wrong"), components=KINDS)
               for p in PAIRS]
    assert result.n_pairs == 3 and result.methods == ["real", "atp", "relp"]
    for kind in ("resid", "attn"):
        for method in result.methods:
            stack = np.stack([s.grid(kind, method) for s in singles])
            assert np.allclose(result.mean(kind, method), stack.mean(axis=0), atol=1e-12)
            assert np.allclose(result.std(kind, method), stack.std(axis=0, ddof=1), atol=1e-12)
        changed = np.asarray(result.grids[kind]["changed_in"])
        assert np.array_equal(changed, sum(np.asarray(s.grids[kind]["changed"], dtype=int) for s in singles))
        assert np.all(result.mean(kind, "real")[changed == 0] == 0.0)  # nothing a patch cannot change
        scores = result.agreement[kind]
        expected = pearson(result.mean(kind, "relp"), result.mean(kind, "real"), changed > 0)
        assert scores["relp"]["mean_grid_r"] == pytest.approx(expected)
        assert scores["relp"]["per_pair"] == [s.agreement[kind]["relp"] for s in singles]
    assert result.pairs[2]["answer"] == singles[2].answer and result.pairs[0]["differing"]
    final = result.mean("resid", "real")[-1, -1]
    assert final == pytest.approx(1.0)  # the final residual at the last position restores every pair exactly
    assert result.std("resid", "real")[-1, -1] == pytest.approx(0.0, abs=1e-9)
    sentence = result.summary()[0]
    assert "over 3 pairs" in sentence and "±" in sentence and "mean-grid" not in sentence
    assert "relp r = " in sentence and "per pair" in sentence


def test_pairs_that_do_not_line_up_are_refused_before_any_run(lm, monkeypatch):
    import interpscope.patching.run as run

    monkeypatch.setattr(run, "patch", lambda *a, **k: pytest.fail("a pair ran"))
    longer = dict(PAIRS[0], clean=PAIRS[0]["clean"] + " him", corrupt=PAIRS[0]["corrupt"] + " him")
    with pytest.raises(InterpscopeError, match=r"same number of tokens.*pair\(s\) 2 differ"):
        patch_set(lm, [PAIRS[0], longer])
    with pytest.raises(InterpscopeError, match="at least one"):
        patch_set(lm, [])


def test_cli_api_and_export_are_one_document(capsys, folder, lm, result, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS), encoding="utf-8")
    capsys.readouterr()
    code = main(["patching", "--model", folder, "--device", "cpu", "--pairs", str(path), "--components", KINDS,
                 "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    cli = json.loads(out.out)
    assert cli["schema"] == "interpscope.patching_set" and cli["summary"] == result.summary()
    assert without_timings(cli) == without_timings(result.to_dict())
    csv = tmp_path / "pairs.csv"
    csv.write_text("clean,corrupt\n" + "".join(f'"{p["clean"]}","{p["corrupt"]}"\n' for p in PAIRS[:2]))
    assert read_pairs(csv.read_bytes(), "pairs.csv") == [{"clean": p["clean"], "corrupt": p["corrupt"]}
                                                         for p in PAIRS[:2]]  # answer / wrong optional
    api = interpscope.patch_set(lm, PAIRS, components=KINDS).to_dict()
    assert without_timings(api) == without_timings(cli)
    assert len(shipped_pairs("ioi")) == 6


@pytest.mark.parametrize("name, content, message", [
    ("p.csv", "clean,corrupt\na,b,c\n", "line 2: 3 fields where the header has 2"),
    ("p.jsonl", '{"clean": "a"}\n', "pair 1: no corrupt text"),
    ("p.jsonl", '{"clean": {"x": 1}, "corrupt": "b"}\n', "flat JSON object"),
    ("p.jsonl", "[" * 100000 + "\n", "not one JSON object"),
    ("p.txt", "a\tb\n", ".jsonl (one object per line) or .csv"),
    ("p.jsonl", "", "is empty"),
])
def test_a_bad_pairs_file_exits_2_with_one_line(capsys, folder, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    out = tmp_path / "never.json"
    capsys.readouterr()
    code = main(["patching", "--model", folder, "--device", "cpu", "--pairs", str(path), "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and not out.exists()
    code = main(["patching", "--model", folder, "--pairs", str(path), "--clean", "x"])
    assert code == 2


def test_the_page_runs_the_shipped_pairs_and_exports_the_document(folder, lm, exports):
    """The page's "A set of pairs" mode on the tiny model: the mode and the pair source are in the URL, nothing runs
    before Run, the export is the API's document, and the single pair's prompts survive the switch."""
    from tests.apptest_util import open_page

    at = open_page("pages/patching.py", model_choice="Other: Hugging Face id or local folder…", model_custom=folder,
                   device="cpu", **{"patch-components-pick": ["resid"], "patch-methods-pick": ["real", "atp"]})
    at.text_area(key="patch-clean").input(PAIRS[1]["clean"]).run()
    at.segmented_control(key="patch-mode").set_value("A set of pairs").run()
    assert not at.exception, at.exception
    assert at.query_params.get("mode") in ("A set of pairs", ["A set of pairs"])
    assert not at.get("plotly_chart") and any("Run over the pairs" in i.value for i in at.info)
    answers = [p["answer"] for p in shipped_pairs("ioi")]
    at.button(key="patch-set-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.patch_set(lm, "ioi", components="resid", methods="real,atp").to_dict()
    assert without_timings(exports["patch-set"]) == without_timings(api)
    assert [p["answer"] for p in api["pairs"]] == answers
    assert any("over 6 pairs" in m.value for m in at.markdown)
    at.segmented_control(key="patch-mode").set_value("One pair").run()
    assert at.text_area(key="patch-clean").value == PAIRS[1]["clean"]  # kept while the mode hid it


def test_pairs_with_their_own_answers_name_the_metric_not_pair_ones(result):
    assert result.metric_label == "logit difference (answer − wrong)"  # not "logit(' Mary') − logit(' John')"
    assert "clean logit difference (answer − wrong)" in result.figure().layout.title.text
