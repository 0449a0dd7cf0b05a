"""Faithfulness on held-out text: the shipped prompt set, perturbation curves with baselines, bootstrap intervals,
the held-out study on a tiny model and `interpscope explain --faithfulness` round trips."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from interpscope.relevance.faithfulness import curves_for_maps, perturbation_curves
from interpscope.relevance.heldout import accuracy, choose, load_set, run_heldout
from interpscope.relevance.heldout_stats import bootstrap_mean, spearman
from interpscope.relevance.targets import Target

CATEGORIES = {"factual", "ioi", "agreement", "code", "arithmetic", "other"}


class _BagOfTokens(nn.Module):
    """A planted model: the logits at every position are the sum over all input embeddings times W, so removing a
    token (embedding set to zero) takes exactly its own share e_t . W[:, c] off logit c."""

    def __init__(self, d: int = 8, vocab: int = 16, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, d)
        self.out = nn.Linear(d, vocab, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(vocab, d, generator=generator, dtype=torch.float64).float())
            self.out.weight.copy_(torch.randn(vocab, d, generator=generator, dtype=torch.float64).float())

    def forward(self, inputs_embeds, use_cache=False, logits_to_keep=None):
        total = inputs_embeds.sum(1, keepdim=True).expand_as(inputs_embeds)
        logits = self.out(total)
        return type("Out", (), {"logits": logits if logits_to_keep is None else logits[:, logits_to_keep]})()


class _Adapter:
    def __init__(self, model):
        self.model = model

    def embedding(self):
        return self.model.embed


def test_oracle_ordering_beats_random_orderings_on_a_planted_model():
    model = _BagOfTokens()
    adapter = _Adapter(model)
    ids = torch.tensor([[1, 5, 2, 9, 3, 7, 4, 11, 6, 0]])
    target = Target(9, 3)
    with torch.no_grad():
        oracle = (model.embed(ids)[0] @ model.out.weight[3]).double().numpy()  # each token's exact share
    rng = np.random.default_rng(0)
    maps = {"oracle": oracle, **{f"r{i}": rng.permutation(10).astype(float) for i in range(50)}}
    zero = torch.zeros(1, 10, 8)
    curves = curves_for_maps(adapter, ids, target, maps, {"zero": zero}, [(k, "zero") for k in maps], steps=10)
    best = curves[("oracle", "zero")].abpc
    randoms = [curves[(f"r{i}", "zero")].abpc for i in range(50)]
    assert all(best >= r - 1e-9 for r in randoms) and best > max(randoms) - 1e-9
    assert best > np.mean(randoms) + 1.0
    # with every token removed one by one (10 steps), MoRF drops by the shares in decreasing order
    morf = curves[("oracle", "zero")].morf
    assert morf[0] - morf[1] == pytest.approx(np.sort(oracle)[::-1][0], rel=1e-4)
    # ABPC is the difference of the two areas it reports
    c = curves[("oracle", "zero")]
    assert c.abpc == pytest.approx(c.lerf_auc - c.morf_auc)


def test_deletion_baseline_and_fixed_positions():
    model = _BagOfTokens(seed=2)
    adapter = _Adapter(model)
    ids = torch.tensor([[4, 2, 8, 1, 6, 3]])
    target = Target(5, 7)
    embeds = model.embed(ids).detach()
    reference = torch.ones_like(embeds)
    relevance = np.arange(6, dtype=float)
    curves = perturbation_curves(adapter, ids, target, relevance, steps=6, reference=reference)
    with torch.no_grad():
        removed = embeds.clone()
        removed[0, 5] = 1.0  # the most relevant token takes the baseline's embedding
        expected = float(model(removed).logits[0, 5, 7])
    assert curves.morf[1] == pytest.approx(expected, rel=1e-5)
    kept = perturbation_curves(adapter, ids, target, relevance, steps=6, fixed=[0])
    assert len(kept.fractions) == 6  # five rankable tokens: 0..5 removed
    with torch.no_grad():
        only_first = torch.zeros_like(embeds)
        only_first[0, 0] = embeds[0, 0]
        assert kept.morf[-1] == pytest.approx(float(model(only_first).logits[0, 5, 7]), rel=1e-5)


def test_bootstrap_interval_contains_the_mean_and_shrinks_with_more_prompts():
    rng = np.random.default_rng(3)
    few, many = rng.normal(2.0, 1.0, 20), rng.normal(2.0, 1.0, 400)
    m_few, lo_few, hi_few = bootstrap_mean(few, seed=1)
    m_many, lo_many, hi_many = bootstrap_mean(many, seed=1)
    assert lo_few <= m_few <= hi_few and lo_many <= m_many <= hi_many
    assert (hi_many - lo_many) < 0.5 * (hi_few - lo_few)
    assert bootstrap_mean(few, seed=1) == bootstrap_mean(few, seed=1)  # seeded
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_the_shipped_set_is_valid_for_the_bundled_tokenizer():
    from transformers import AutoTokenizer

    from interpscope.models import smollm2

    rows = load_set("heldout")
    assert len(rows) >= 200
    assert {r["category"] for r in rows} == CATEGORIES
    assert len({r["id"] for r in rows}) == len(rows)
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2.convert()))
    for row in rows:
        ids = tokenizer.encode(row["expected"], add_special_tokens=False)
        assert ids == [row["expected_id"]], row["id"]
        assert isinstance(row["model_correct"], bool) and 0 <= row["p_expected"] <= 1
        assert row["model_correct"] == (row["model_top1_id"] == row["expected_id"])
    table = accuracy(rows)
    assert table["all"]["n"] == len(rows) and set(table) == CATEGORIES | {"all"}
    picked = choose(rows, limit=12)
    assert len(picked) == 12 and {r["category"] for r in picked} == CATEGORIES


def _tiny():
    from tests.sae_store_tiny import tiny_lm

    return tiny_lm(seed=1)


PROMPTS = [{"id": f"t-{i}", "category": c, "text": t, "expected": e}
           for i, (c, t, e) in enumerate([("a", "The cat sat on the", " mat"), ("a", "One, two, three,", " four"),
                                          ("b", "Paris is the capital of", " France"),
                                          ("b", "When Mary and John went out, John thanked", " Mary"),
                                          ("c", "def f(x):\n    return", " x")])]


def test_heldout_study_on_a_tiny_model():
    lm = _tiny()
    seen = []
    two_tokens = {"id": "t-x", "category": "c", "text": "The capital of Burkina Faso is", "expected": " Ouagadougou"}
    result = run_heldout(lm, [*PROMPTS, two_tokens], methods=["attnlrp", "cplrp", "gradxinput", "ig", "occlusion"],
                         ig_steps=4, curve_steps=4, bootstrap=200, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (6, 6) and len(result.rows) == 5
    assert [s["id"] for s in result.skipped] == ["t-x"] and "tokens for" in result.skipped[0]["error"]
    for row in result.rows:  # the model's own top-1, read off the attribution's forward pass
        ids = lm.encode(row["text"])
        with torch.no_grad():
            top = int(lm.model(ids).logits[0, -1].argmax())
        assert row["model_correct"] == (top == lm.tokenizer.encode(row["expected"])[0])
    n_correct = sum(r["model_correct"] for r in result.rows)
    assert lm.tokenizer.pad_token_id is not None and result.settings.baselines == ["zero", "pad", "mean"]
    names = {"attnlrp", "cplrp", "gradxinput", "ig", "occlusion", "random"}
    for subset, n in (("all", 5), ("model_correct", n_correct)):
        for baseline in ("zero", "pad", "mean"):
            rows = [t for t in result.table if t["subset"] == subset and t["baseline"] == baseline]
            if n == 0:
                assert not rows
                continue
            assert {t["method"] for t in rows} == names and all(t["n"] == n for t in rows)
            assert sorted(t["rank"] for t in rows) == list(range(1, 7))
            for t in rows:
                assert t["ci_low"] <= t["mean_abpc"] <= t["ci_high"]
                assert t["mean_abpc"] == pytest.approx(np.mean([
                    r["abpc"][baseline][t["method"]] for r in result.rows if subset == "all" or r["model_correct"]]))
    for row in result.rows:
        assert row["softmax_share"] is not None and set(row["abpc_sinks_fixed"]["zero"]) == names
        assert all(0 <= i < len(row["tokens"]) for i in row["sinks"])
        assert len(row["relevance"]["attnlrp"]) == len(row["tokens"])
    assert "AttnLRP" in result.sentence and "mean ABPC" in result.sentence
    assert set(result.diagnosis["ranking"]) == {"zero", "pad", "mean"}


def _with_a_sink_at_1(monkeypatch):
    """Make the held-out rows' one sink helper measure position 1, the text's first token after the prefix, as a
    sink (123x): a tiny random model has none."""
    import interpscope.relevance.heldout as heldout
    from interpscope.sinks import SinkReport

    measured = heldout.sink_report

    def report(adapter, ids, prepended=None):
        found = measured(adapter, ids, prepended)
        return SinkReport(measured={**found.measured, 1: 123.0}, prepended=found.prepended, point=found.point,
                          ratios=found.ratios)

    monkeypatch.setattr(heldout, "sink_report", report)


def test_heldout_rows_name_why_each_position_is_excluded(monkeypatch):
    from interpscope.inputs import input_ids_for
    from interpscope.relevance.file_attribution import OLD_ROW_REASON, excluded_reasons
    from interpscope.relevance.sinks import sink_report

    lm = _tiny()
    plain = run_heldout(lm, PROMPTS[:2], methods=["gradxinput"], baselines=["zero"], curve_steps=2, bootstrap=20)
    for row in plain.rows:  # the one sink helper's rows, as explain() and whole-file rows keep them
        ids, prepended = input_ids_for(lm, row["text"], None)  # as every view runs it: the prefix token first
        assert prepended and row["prefix_kept"] and row["tokens"] == lm.token_strings(ids[0])
        assert row["excluded"] == sink_report(lm.adapter, ids, 0).rows(row["tokens"])
        assert row["excluded"][0]["position"] == 0 and row["excluded"][0]["prepended"] is True
        assert OLD_ROW_REASON not in excluded_reasons(row).values()
    _with_a_sink_at_1(monkeypatch)
    result = run_heldout(lm, PROMPTS[:2], methods=["gradxinput"], baselines=["zero"], curve_steps=2, bootstrap=20)
    for row in result.rows:
        assert 1 in row["sinks"]
        first = next(e for e in row["excluded"] if e["position"] == 1)
        assert first["reason"] == "measured attention sink, 123x the median norm" and first["ratio"] == 123.0
        assert first["token"] == row["tokens"][1] and first["prepended"] is False
        assert excluded_reasons(row)[1] == "measured attention sink, 123x the median norm"


def test_explain_faithfulness_json_round_trip(tmp_path, capsys, monkeypatch):
    from interpscope.cli import common, main

    lm = _tiny()
    monkeypatch.setattr(common, "load_from_args", lambda args: lm)
    import interpscope.cli.relevance_cmd as relevance_cmd

    monkeypatch.setattr(relevance_cmd, "load_from_args", lambda args: lm)
    out = tmp_path / "one.json"
    assert main(["explain", "--text", "The cat sat on the", "--faithfulness", "--method", "gradxinput",
                 "--baseline", "mean", "--curve-steps", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["method"] == "gradxinput" and data["baseline"] == "mean" and data["steps"] == 4
    assert data["abpc"] == pytest.approx(data["lerf_auc"] - data["morf_auc"])
    assert data["random_ci_low"] <= data["random_abpc"] <= data["random_ci_high"]
    assert f"ABPC {data['abpc']:.4f}" in printed
    prompts = tmp_path / "set.json"
    monkeypatch.setattr("interpscope.relevance.heldout.load_set", lambda name: PROMPTS)
    assert main(["explain", "--set", "heldout", "--faithfulness", "--methods", "cplrp", "gradxinput",
                 "--baselines", "zero", "--curve-steps", "3", "--bootstrap", "100", "--json", str(prompts)]) == 0
    doc = json.loads(prompts.read_text())
    assert doc["set"] == "heldout" and len(doc["rows"]) == 5 and doc["settings"]["curve_steps"] == 3
    assert {t["method"] for t in doc["table"]} == {"cplrp", "gradxinput", "random"}
    assert "zero baseline" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["explain", "--set", "heldout"], "--set goes with --faithfulness"),
    (["explain", "--text", "Hi there", "--faithfulness", "--limit", "3"], "--limit goes with --set"),
    (["explain", "--set", "heldout", "--faithfulness", "--contrast", "a", "b"], "takes no --target-token"),
])
def test_explain_faithfulness_bad_input(capsys, monkeypatch, argv, message):
    import interpscope.cli.relevance_cmd as relevance_cmd
    from interpscope.cli import main

    monkeypatch.setattr(relevance_cmd, "load_from_args", lambda args: _tiny())
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_batch_view_reads_the_shipped_set(tmp_path, monkeypatch):
    import html

    from tests.apptest_util import open_page
    from tests.sae_store_tiny import save_tiny_lm

    _with_a_sink_at_1(monkeypatch)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    model = save_tiny_lm(tmp_path / "model", seed=3)
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(model))
    at.radio(key="relevance-file-source").set_value("heldout").run()
    at.number_input(key="relevance-file-set-n").set_value(3).run()
    assert not any("ABPC" in m.value for m in at.markdown)  # nothing computed before Run
    assert at.query_params.get("fsource") == ["heldout"] or at.query_params.get("fsource") == "heldout"
    at.button(key="relevance-file-set-run").click().run()
    assert not at.exception, at.exception
    first = load_set("heldout")
    picked = choose(first, limit=3)
    assert {r["category"] for r in picked} == {"factual", "ioi", "agreement"}
    sentence = next(m.value for m in at.markdown if m.value.startswith("Over these prompts"))
    assert "AttnLRP" in sentence and "baseline" in sentence
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Mean ABPC, all prompts" in t for t in titles)
    frames = at.dataframe
    assert frames and set(frames[0].value["method"]) >= {"AttnLRP", "Random order (chance)"}
    assert len(frames[0].value) == 3 * 6  # three baselines x (five methods + the random control)
    assert any(f"`{picked[0]['id']}`" in m.value for m in at.markdown)  # the first prompt's map is shown
    row_map = html.unescape(next(m.value for m in at.markdown if 'class="relevance-token"' in m.value))
    assert "(measured attention sink, 123x the median norm" in row_map  # why, not a bare "excluded"
