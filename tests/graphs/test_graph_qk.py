"""QK attribution: one head's pre-softmax score from a query to a key position split over the graph's nodes on both
sides. On tiny Llama, Qwen3 (q/k norms) and Gemma 3 (q/k norms, sandwich norms, skip transcoders) models, and on
SmolLM2: the real scores' softmax is the head's real attention pattern (so the score being split is the right one),
the parts sum to it (1e-4), and with every node listed the rest is the attention biases alone (zero here)."""
from __future__ import annotations

import pytest
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.graphs import build_graph
from interpscope.graphs.qk import REST, qk_attribution, real_scores
from interpscope.graphs.replay import record
from tests.graphs.test_graphs import TEXT, _lm, _sparse_set
from tests.tiny import FAMILIES, relevance_model, tiny_llama

EVERYTHING = dict(node_budget=100_000, edge_budget=10**7, max_feature_nodes=100_000, lrp=None)


def _model(family: str):
    if family == "llama":
        return _lm(tiny_llama(vocab=128, seed=3), name="tiny-llama")
    if family == "qwen3":
        return _lm(FAMILIES["qwen3"].build(seed=1, vocab_size=128), name="tiny-qwen3")
    return _lm(relevance_model("gemma3", seed=2), name="tiny-gemma3")


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_the_parts_sum_to_the_real_score_whose_softmax_is_the_pattern(family):
    lm = _model(family)
    tset = _sparse_set(lm)
    if family == "gemma3":
        from tests.graphs.test_graph_gemma import _with_skip

        _with_skip(tset)
    graph = build_graph(lm, tset, TEXT, **EVERYTHING)
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    T = run.n_tokens
    layer, head, query = run.n_layers - 1, 1, T - 1
    scores = real_scores(lm, run, graph, layer, head, query)
    allowed = run.patterns[layer][head, query] > 0
    expected = torch.softmax(scores[allowed], -1)
    torch.testing.assert_close(expected, run.patterns[layer][head, query][allowed], rtol=1e-5, atol=1e-7)
    for key in (0, T // 2, query):
        split = qk_attribution(lm, run, tset, graph, layer, head, query, key, top=5)
        assert split.total == pytest.approx(split.score, rel=1e-4, abs=1e-6)
        assert abs(split.difference) <= 1e-4 * max(1.0, abs(split.score))
        assert split.pattern == pytest.approx(float(run.patterns[layer][head, query, key]))
        rest = {p["node"]: p["part"] for p in split.query_side}.get(REST, 0.0)
        # every active feature, error and embedding below the block is a node of this unpruned graph: no rest
        assert abs(rest) <= 1e-6 * max(1.0, abs(split.score))
        assert split.query_side and split.key_side and split.pairs
        assert split.to_dict()["schema"] == "interpscope.graph.qk_attribution"
        assert f"L{layer}.H{head}" in split.summary()


def test_a_pruned_graph_puts_what_it_dropped_in_the_rest_and_bad_heads_are_refused():
    lm = _model("llama")
    tset = _sparse_set(lm)
    graph = build_graph(lm, tset, TEXT, node_budget=5, edge_budget=10, max_feature_nodes=20, lrp=None)
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    split = qk_attribution(lm, run, tset, graph, 1, 0, run.n_tokens - 1, 2)
    assert split.total == pytest.approx(split.score, rel=1e-4, abs=1e-6)
    assert any(p["node"] == REST and abs(p["part"]) > 0 for p in split.query_side + split.key_side)
    for args in ((5, 0, 3, 2), (1, 99, 3, 2), (1, 0, 2, 3)):
        with pytest.raises(InterpscopeError):
            qk_attribution(lm, run, tset, graph, *args)


@pytest.mark.bundled
def test_smollm2_head_scores_split_exactly(bundled_lm):
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    tset = load_transcoder_set(default_transcoder_set("smollm2-135m"), lm=bundled_lm)
    text = "The capital of France is"
    graph = build_graph(bundled_lm, tset, text, max_feature_nodes=16, lrp=None)
    with model_lock(bundled_lm):
        from interpscope.graphs.interventions import graph_input_ids

        run = record(bundled_lm, graph_input_ids(bundled_lm, graph))
    split = qk_attribution(bundled_lm, run, tset, graph, 12, 3, run.n_tokens - 1, 1)
    assert abs(split.difference) <= 1e-4 * max(1.0, abs(split.score))
    scores = real_scores(bundled_lm, run, graph, 12, 3, run.n_tokens - 1)
    torch.testing.assert_close(torch.softmax(scores, -1), run.patterns[12][3, -1], rtol=1e-4, atol=1e-6)
