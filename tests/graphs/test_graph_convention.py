"""circuit-tracer's convention (build_graph(convention="circuit-tracer"), interpscope.graphs.convention): the demeaned
target's contributions plus the parts in no node (b_dec, the first position) add up to logit - mean(logits), the
first position's features and errors are absent, only expanded features are columns, the scores are circuit-tracer's
(checked against a closed-form (I - N)^-1), pruning follows its thresholds; the CLI gives the API's document and
refuses the other convention's options; converted model folders carry what transformers 4.x reads."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.graphs import build_graph, convention
from interpscope.graphs.replay import record
from interpscope.results import without_timings
from tests.graphs.test_graphs import TEXT, _assert_same, _lm, _run_cli, _sparse_set
from tests.tiny import tiny_llama


@pytest.fixture(scope="module")
def tiny_bdec():
    """The tiny Llama and sparse random transcoders with a nonzero decoder bias."""
    lm = _lm(tiny_llama(vocab=128, seed=3))
    tset = _sparse_set(lm)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for tc in tset.transcoders:
            tc.b_dec.copy_(torch.randn(tc.b_dec.shape, generator=generator, dtype=tc.b_dec.dtype))
    return lm, tset


def _ct(lm, tset, **options):
    return build_graph(lm, tset, TEXT, convention="circuit-tracer", lrp=None, **options)


def _logits(lm) -> torch.Tensor:
    with model_lock(lm):
        return record(lm, lm.encode(TEXT)).logits.double()


def test_demeaned_target_plus_what_is_in_no_node_adds_up(tiny_bdec):
    lm, tset = tiny_bdec
    graph = _ct(lm, tset, max_feature_nodes=30)
    logits = _logits(lm)
    assert graph.convention == "circuit-tracer" and graph.to_dict()["schema_version"] == 2
    for entry in graph.logits:  # every logit node: its demeaned logit, its own sums
        demeaned = float(logits[entry["id"]] - logits.mean())
        assert entry["logit"] == pytest.approx(demeaned, rel=1e-9)
        total = entry["logit_inputs_sum"] + entry["left_out"]["b_dec"] + entry["left_out"]["bos"]
        assert total == pytest.approx(demeaned, rel=1e-6, abs=1e-9)
    assert graph.logit == graph.logits[0]["logit"]
    assert graph.logit_inputs_sum + graph.left_out["total"] == pytest.approx(graph.logit, rel=1e-6)
    assert abs(graph.left_out["b_dec"]) > 1e-3 and abs(graph.left_out["bos"]) > 0  # they are left out, not zero
    assert f"{graph.left_out['b_dec']:+.4f}" in graph.notes[0]  # the note says it, computed
    # circuit-tracer's logit nodes: the top tokens until p 0.95 (up to 10), weighted by their raw probabilities
    probabilities = torch.softmax(logits, -1)
    top = torch.argsort(probabilities, descending=True)[:10].tolist()
    assert [e["id"] for e in graph.logits] == top[:len(graph.logits)]
    assert [e["weight"] for e in graph.logits] == pytest.approx([float(probabilities[t]) for t in top[:10]][
        :len(graph.logits)])


def test_b_dec_is_in_no_node(tiny_bdec):
    """Doubling b_dec doubles its left-out part and takes the added b_dec out of the error nodes (the MLP outputs are
    the model's, so error = mlp_out - features - b_dec); Interpscope's own error nodes hold b_dec, so there nothing
    moves."""
    lm, tset = tiny_bdec
    first = _ct(lm, tset, max_feature_nodes=10)
    own = build_graph(lm, tset, TEXT, max_feature_nodes=10, lrp=None)
    with torch.no_grad():
        for tc in tset.transcoders:
            tc.b_dec.mul_(2)
    try:
        second = _ct(lm, tset, max_feature_nodes=10)
        own_second = build_graph(lm, tset, TEXT, max_feature_nodes=10, lrp=None)
    finally:
        with torch.no_grad():
            for tc in tset.transcoders:
                tc.b_dec.div_(2)
    assert second.left_out["b_dec"] == pytest.approx(2 * first.left_out["b_dec"], rel=1e-9)
    assert second.logit_inputs_sum - first.logit_inputs_sum == pytest.approx(-first.left_out["b_dec"], rel=1e-9)
    assert second.left_out["bos"] == pytest.approx(first.left_out["bos"], rel=1e-9)
    assert own.logit_inputs_sum == pytest.approx(own.logit, rel=1e-6)
    assert own_second.logit_inputs_sum == pytest.approx(own.logit_inputs_sum, rel=1e-9)
    assert own.left_out is None and own.convention == "interpscope"


def test_first_position_zeroed_and_only_expanded_features(tiny_bdec):
    lm, tset = tiny_bdec
    graph = _ct(lm, tset, max_feature_nodes=6, node_threshold=1.0, edge_threshold=1.0)
    own = build_graph(lm, tset, TEXT, max_feature_nodes=6, lrp=None, node_budget=500, edge_budget=100000)
    features = {n["id"] for n in graph.nodes if n["kind"] == "feature"}
    assert features and not any(n["position"] == 0 for n in graph.nodes if n["kind"] == "feature")
    assert all(n["activation"] == 0 for n in graph.nodes if n["kind"] == "error" and n["position"] == 0)
    assert len(features) <= graph.n_expanded_features == 6
    sources = {e["source"] for e in graph.edges if e["source"].startswith("F")}
    assert sources <= features  # no unexpanded feature is a source
    # Interpscope's convention keeps every active feature as a source: here many more than the 6 expanded
    assert len({e["source"] for e in own.edges if e["source"].startswith("F")}) > 6
    assert any(n["position"] == 0 for n in own.nodes if n["kind"] == "feature")
    assert graph.n_active_features < own.n_active_features  # the first position's features are not active


def _captured(monkeypatch, lm, tset, **options):
    seen = {}
    original = convention.assemble

    def capture(lm_, rep, adj, *args, **kwargs):
        seen.update(rep=rep, adj=adj)
        return original(lm_, rep, adj, *args, **kwargs)
    monkeypatch.setattr(convention, "assemble", capture)
    graph = _ct(lm, tset, **options)
    return graph, seen["rep"], seen["adj"]


def test_scores_and_influence_are_circuit_tracers(tiny_bdec, monkeypatch):
    """Against the closed form: influence = w ((I - N)^-1 - I) on circuit-tracer's square graph."""
    lm, tset = tiny_bdec
    graph, rep, adj = _captured(monkeypatch, lm, tset, max_feature_nodes=25)
    A, row_node = adj.matrix()
    M, columns = convention.square(A, row_node, rep.n_features, rep.n_columns)
    k = len(graph.logits)
    N = np.abs(M) / np.maximum(np.abs(M).sum(1, keepdims=True), 1e-10)
    w = np.zeros(M.shape[0])
    w[-k:] = [e["probability"] for e in graph.logits]
    influence = w @ (np.linalg.inv(np.eye(M.shape[0]) - N) - np.eye(M.shape[0]))
    n_feat, T, L = graph.n_expanded_features, rep.run.n_tokens, rep.run.n_layers
    errors, tokens = slice(n_feat, n_feat + L * T), slice(n_feat + L * T, n_feat + L * T + T)
    replacement = influence[tokens].sum() / (influence[tokens].sum() + influence[errors].sum())
    output = influence + w
    completeness = ((1 - N[:, errors].sum(1)) * output).sum() / output.sum()
    assert graph.replacement_score == pytest.approx(replacement, rel=1e-9)
    assert graph.completeness_score == pytest.approx(completeness, rel=1e-9)
    by_id = {n["id"]: n["influence"] for n in graph.nodes if n["kind"] in ("feature", "error")}
    labels = {f"R{(c - rep.n_features) // T}_{(c - rep.n_features) % T}": i for i, c in enumerate(columns)
              if rep.n_features <= c < rep.embedding_column(0)}
    for node, value in by_id.items():
        if node in labels:
            assert value == pytest.approx(influence[labels[node]], rel=1e-9, abs=1e-12)


def test_pruning_follows_the_thresholds(tiny_bdec):
    lm, tset = tiny_bdec
    graphs = {t: _ct(lm, tset, max_feature_nodes=25, node_threshold=t, edge_threshold=0.98) for t in (0.5, 0.8, 1.0)}
    kept = {t: {n["id"] for n in g.nodes if n["kind"] in ("feature", "error")} for t, g in graphs.items()}
    assert kept[0.5] <= kept[0.8] <= kept[1.0] and len(kept[0.5]) < len(kept[1.0])
    graph = graphs[0.8]
    assert graph.thresholds == {"node": 0.8, "edge": 0.98} and graph.node_budget == graph.edge_budget == 0
    T = len(graph.tokens)
    assert sum(n["kind"] == "embedding" for n in graph.nodes) == T  # every embedding and logit is kept
    assert sum(n["kind"] == "logit" for n in graph.nodes) == len(graph.logits)
    into = {e["target"] for e in graph.edges}
    out_of = {e["source"] for e in graph.edges}
    for node in graph.nodes:  # features need an edge in and out, errors an edge out (circuit-tracer's rule)
        if node["kind"] == "feature":
            assert node["id"] in into and node["id"] in out_of
        if node["kind"] == "error":
            assert node["id"] in out_of
    kept_influence = sorted((n["influence"] for n in graph.nodes if n["kind"] in ("feature", "error")),
                            reverse=True)
    fewer = graphs[0.5]
    assert min(n["influence"] for n in fewer.nodes if n["kind"] in ("feature", "error")) >= kept_influence[-1]


def test_refusals(tiny_bdec):
    from interpscope.graphs.interventions import GraphRun

    lm, tset = tiny_bdec
    with pytest.raises(InterpscopeError, match="Unknown convention"):
        build_graph(lm, tset, TEXT, convention="neuronpedia", lrp=None)
    with pytest.raises(InterpscopeError, match="node_threshold"):
        _ct(lm, tset, node_threshold=1.5)
    graph = _ct(lm, tset, max_feature_nodes=4)
    with pytest.raises(InterpscopeError, match="convention='interpscope'"):
        GraphRun(lm, tset, graph)


def test_cli_document_equals_api(folders):
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm, model_dir, set_dir = folders
    text = "The cat sat on the"
    result = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", text,
                      "--convention", "circuit-tracer", "--node-threshold", "0.7", "--max-feature-nodes", "12",
                      "--dtype", "float64", "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    api = build_graph(lm, load_transcoder_set(set_dir, lm=lm), text, convention="circuit-tracer", node_threshold=0.7,
                      max_feature_nodes=12).to_dict()
    assert document["convention"] == "circuit-tracer" and document["thresholds"]["node"] == 0.7
    _assert_same(without_timings(document), without_timings(json.loads(json.dumps(api))))


@pytest.mark.parametrize("extra, message", [
    (("--convention", "circuit-tracer", "--node-budget", "5"), "prunes by --node-threshold"),
    (("--edge-threshold", "0.9",), "belong(s) to --convention circuit-tracer"),
    (("--convention", "circuit-tracer", "--ablation-check", "3"), "interpscope convention only"),
    (("--convention", "circuit-tracer", "--node-threshold", "1.5"), "--node-threshold"),
])
def test_cli_refuses_the_other_conventions_options(folders, capsys, extra, message):
    from interpscope.cli import main

    _, model_dir, set_dir = folders
    assert main(["graph", "--model", str(model_dir), "--dtype", "float64", "--transcoders", str(set_dir),
                 "--text", "The cat", *extra]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_converted_folders_read_right_by_transformers_4(tmp_path):
    """transformers 5 writes the rotary base only in rope_parameters; 4.x reads rope_theta (default 10000)."""
    from transformers import AutoConfig, LlamaConfig

    from interpscope.models.gguf_bundle import legacy_rope_keys, write_legacy_keys

    LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                rope_theta=123456.0).save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    before = json.loads((tmp_path / "config.json").read_text())
    assert "rope_theta" not in before  # what transformers 4.x would read as 10000
    write_legacy_keys(tmp_path)
    after = json.loads((tmp_path / "config.json").read_text())
    assert after["rope_theta"] == 123456.0 and {k: after[k] for k in before} == before
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert AutoConfig.from_pretrained(tmp_path).rope_parameters["rope_theta"] == 123456.0  # 5.x still reads it
    gemma = {"rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                                 "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}}
    assert legacy_rope_keys(gemma) == {"rope_theta": 1e6, "rope_local_base_freq": 1e4}
    linear = {"rope_parameters": {"rope_theta": 5e5, "rope_type": "linear", "factor": 8.0}}
    assert legacy_rope_keys(linear) == {"rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert legacy_rope_keys({**linear, "rope_theta": 5e5, "rope_scaling": {}}) == {}


def test_transcoders_write_apply_b_dec_to_input_false(tmp_path):
    """b_dec is an output bias: a saved ReLU transcoder says so, and so does the shipped set."""
    from pathlib import Path

    from interpscope.sae import SAEConfig, build_sae, save_sae

    cfg = SAEConfig(d_in=8, d_sae=16, architecture="transcoder", extra={"d_out": 8})
    save_sae(build_sae(cfg, seed=0), tmp_path / "tc")
    assert json.loads((tmp_path / "tc" / "cfg.json").read_text())["apply_b_dec_to_input"] is False
    shipped = sorted((Path(__file__).resolve().parents[2] / "assets" / "transcoders" / "smollm2-135m").glob(
        "layer_*/cfg.json"))
    assert len(shipped) == 30
    assert all(json.loads(p.read_text())["apply_b_dec_to_input"] is False for p in shipped)
