"""Sinks are measured, never assumed: a planted massive-activation row is excluded and a normal first token is not;
a prepended BOS lets the first word be explained like any other; Mamba wording has no attention sinks; the readout
names the relevance the excluded tokens hold.

The planted sink: a tiny GPT-2 whose embedding of " the" is scaled up 1000x, so its residual at the middle block is
hundreds of times the other rows' (as SmolLM2's first token is, ~130x).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.figures.relevance.readout import readout
from interpscope.figures.tokens import heatmap_html, normalised
from interpscope.relevance.api import explain
from interpscope.sinks import excluded_mask, measure, others_median_ratio
from tests.sae_store_tiny import tiny_lm

TEXT = "Paris is the capital of"


@pytest.fixture(scope="module")
def sink_lm():
    lm = tiny_lm(seed=2)
    token = lm.tokenizer.encode(" the")[0]
    with torch.no_grad():
        lm.model.transformer.wte.weight[token] *= 1000.0
    return lm


def test_the_ratio_is_to_the_median_of_the_other_rows():
    x = torch.randn(3, 9, 8)
    x[1, 4] *= 40.0
    ratios = others_median_ratio(x)
    norms = x.norm(dim=-1).numpy()
    for b in range(3):
        for t in range(9):
            others = np.delete(norms[b], t)
            assert ratios[b, t].item() == pytest.approx(norms[b, t] / np.sort(others)[(others.size - 1) // 2],
                                                        rel=1e-5)
    assert excluded_mask(x, window_start=False).nonzero().tolist() == [[1, 4]]  # not excluded for being first
    assert excluded_mask(x)[:, 0].all()  # corpus windows: the cut's first position too
    assert torch.isnan(others_median_ratio(torch.randn(1, 4))).all()  # one row: nothing to compare with
    report = measure(x[1])
    assert report.positions == [4] and report.measured[4] == pytest.approx(ratios[1, 4].item())


def test_a_planted_massive_row_is_the_sink_and_a_normal_first_token_is_not(sink_lm):
    result = explain(sink_lm, TEXT, "gradxinput", prepend_bos=False)
    where = result.tokens.index(" the")
    assert result.tokens[0] == "Paris" and not result.bos_prepended
    assert result.sink_positions == [where]
    [row] = result.sinks
    assert row["position"] == where and row["ratio"] > 100 and not row["prepended"]
    assert row["reason"].startswith("measured attention sink, ") and "x the median norm" in row["reason"]
    weights = normalised(result.relevance, result.sink_positions)
    assert np.isfinite(weights[0]) and np.isnan(weights[where])  # the first word sets the scale, the sink does not


def test_with_prepend_on_the_first_word_gets_its_own_relevance_and_is_in_the_colour_scale():
    lm = tiny_lm(seed=2)
    bos = lm.tokenizer.bos_token_id
    result = explain(lm, TEXT, "attnlrp")  # GPT-2's tokenizer adds no BOS: on by default
    assert result.bos_prepended and result.token_ids[0] == bos and result.tokens[1] == "Paris"
    assert 0 in result.sink_positions and 1 not in result.sink_positions
    assert result.sinks[0]["prepended"] and result.sinks[0]["reason"].startswith("prepended BOS")
    assert result.relevance[1] != 0.0
    weights = normalised(result.relevance, result.sink_positions)
    assert np.isnan(weights[0]) and np.isfinite(weights[1])
    html = heatmap_html(result.tokens, result.relevance, result.sink_positions, result.sink_reasons())
    assert "prepended BOS: not used for the colour scale" in html
    assert "Not used for the colour scale: position 0" in html
    off = explain(lm, TEXT, "attnlrp", prepend_bos=False)
    assert not off.bos_prepended and off.tokens[0] == "Paris" and len(off.tokens) == len(result.tokens) - 1


def test_the_readout_names_the_relevance_the_excluded_tokens_hold(sink_lm):
    result = explain(sink_lm, TEXT, "attnlrp", prepend_bos=True)
    held = {p: float(result.relevance[p]) for p in result.sink_positions}
    assert len(held) == 2  # the prepended BOS and the planted sink
    sentence = readout(result).sentence
    for position, value in held.items():
        assert f"{result.tokens[position]!r} (excluded: " in sentence and f"holds R = {value:+.3g}" in sentence
    rest = result.conservation.input_sum - sum(held.values())
    assert f"the other {len(result.tokens) - 2} tokens carry {rest:+.3g}" in sentence
    assert "(and position embeddings)" in sentence or abs(result.conservation.bias_sum) < 1e-9  # GPT-2 has them


def test_mamba_wording_has_no_attention_sink_and_no_position_embeddings():
    from interpscope.models.tokenizers import gpt2_tokenizer
    from tests.tiny import GPT2_VOCAB, loaded, tiny_mamba

    lm = loaded(tiny_mamba(vocab=GPT2_VOCAB, seed=1), gpt2_tokenizer(), name="tiny-mamba")
    result = explain(lm, TEXT, "mambalrp", prepend_bos=True)
    assert result.model_kind == ["state_space"] and result.bos_prepended
    text = readout(result).sentence + heatmap_html(result.tokens, result.relevance, result.sink_positions,
                                                   result.sink_reasons())
    for row in result.sinks:
        text += row["reason"]
    assert "attention sink" not in text.lower() and "position embedding" not in text.lower()
    assert "prepended BOS" in text
    assert not explain(lm, TEXT, "mambalrp").bos_prepended  # no attention, no sink to give a BOS: off by default


def test_information_flow_prepends_the_bos_and_names_the_excluded_tokens(sink_lm):
    from interpscope.flow.information import information_flow

    flow = information_flow(sink_lm, TEXT)
    assert flow.bos_prepended and flow.tokens[1] == "Paris"
    where = flow.tokens.index(" the")
    assert [row["position"] for row in flow.sinks] == [0, where]
    labels = {node.position: node.label for node in flow.graph(0.0)[0] if node.kind == "token"}
    assert labels[0].endswith("(BOS)") and labels[where].endswith("(sink)") and labels[1] == "1: 'Paris'"
