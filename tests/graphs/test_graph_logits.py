"""Attribution graphs with several logit nodes (circuit-tracer's top logits): every logit node's contributions add up
to its own logit, influence is the probability-weighted sum of the one-logit graphs' influences, the target stays
first and keeps its interventions, the export marks it, and bad settings are refused in the API and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.graphs import build_graph
from interpscope.graphs.interventions import PrunedGraph, target_node
from interpscope.results import without_timings
from tests.graphs.test_graphs import TEXT, _assert_same, _lm, _run_cli, _sparse_set
from tests.tiny import tiny_llama

EVERYTHING = dict(node_budget=100_000, edge_budget=1_000_000, max_feature_nodes=100_000, lrp=None)


@pytest.fixture(scope="module")
def tiny():
    lm = _lm(tiny_llama(vocab=128, seed=3))
    return lm, _sparse_set(lm)


def _next_token_probabilities(lm) -> torch.Tensor:
    """The next-token distribution after TEXT, as the graph's prompt is tokenised (a BOS where the page adds one)."""
    from interpscope.graphs.defaults import MAX_TOKENS
    from interpscope.relevance.api import input_ids_for

    ids, _ = input_ids_for(lm, TEXT, max_tokens=MAX_TOKENS)
    with torch.no_grad():
        logits = lm.model(ids).logits[0, -1]
    return torch.softmax(logits.double(), -1)


def test_every_logit_node_adds_up_to_its_own_logit(tiny):
    lm, tset = tiny
    probabilities = _next_token_probabilities(lm)
    graph = build_graph(lm, tset, TEXT, max_logits=4, logit_probability=1.0, **EVERYTHING)
    top = torch.argsort(probabilities, descending=True)[:4].tolist()
    assert [entry["id"] for entry in graph.logits] == top  # the top token is the target, then the next three
    assert graph.target["id"] == top[0] and graph.logits[0]["node"] == target_node(graph)
    weights = np.array([entry["weight"] for entry in graph.logits])
    assert weights.sum() == pytest.approx(1.0)
    assert weights == pytest.approx(probabilities[top].numpy() / float(probabilities[top].sum()), rel=1e-9)
    for entry in graph.logits:
        assert entry["probability"] == pytest.approx(float(probabilities[entry["id"]]), rel=1e-9)
        assert entry["logit_inputs_sum"] == pytest.approx(entry["logit"], rel=1e-6)
    assert graph.logit_inputs_sum == pytest.approx(graph.logits[0]["logit_inputs_sum"])
    logit_nodes = [n for n in graph.nodes if n["kind"] == "logit"]
    assert [n["feature"] for n in logit_nodes] == top
    assert [n["target"] for n in logit_nodes] == [True, False, False, False]
    assert [n["influence"] for n in logit_nodes] == pytest.approx(weights.tolist())
    ids = {n["id"] for n in graph.nodes}
    into = {e["target"] for e in graph.edges if e["target"] in {n["id"] for n in logit_nodes}}
    assert into == {n["id"] for n in logit_nodes}  # with everything kept, every logit node has its edges
    assert all(e["source"] in ids and e["target"] in ids for e in graph.edges)


def test_influence_is_the_weighted_sum_of_the_one_logit_graphs(tiny):
    """Influence is linear in the seed: with every feature expanded and every node kept, the several-logit graph's
    influence of each node is the weights' sum of its influences in the one-logit graphs of each token; its direct
    effects on the target (logit_effect) are the target's own graph's."""
    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, max_logits=3, logit_probability=1.0, **EVERYTHING)
    singles = [build_graph(lm, tset, TEXT, target=f"#{entry['id']}", **EVERYTHING) for entry in graph.logits]
    influence = [{n["id"]: n["influence"] for n in single.nodes if n["kind"] != "logit"} for single in singles]
    checked = 0
    for node in graph.nodes:
        if node["kind"] == "logit":
            continue
        expected = sum(entry["weight"] * influence[k].get(node["id"], 0.0) for k, entry in enumerate(graph.logits))
        assert node["influence"] == pytest.approx(expected, rel=1e-6, abs=1e-12), node["id"]
        checked += 1
    assert checked > 20
    target_effects = {n["id"]: n["logit_effect"] for n in singles[0].nodes if n["kind"] != "logit"}
    for node in graph.nodes:
        if node["id"] in target_effects:
            assert node["logit_effect"] == pytest.approx(target_effects[node["id"]], rel=1e-9, abs=1e-15)


def test_a_named_target_comes_first_and_keeps_the_interventions(tiny):
    lm, tset = tiny
    probabilities = _next_token_probabilities(lm)
    ranked = torch.argsort(probabilities, descending=True).tolist()
    named = ranked[5]  # not among the top: the others are still the most probable tokens
    graph = build_graph(lm, tset, TEXT, target=f"#{named}", max_logits=3, logit_probability=1.0, node_budget=20,
                        edge_budget=80, max_feature_nodes=30, lrp="cplrp")
    assert [entry["id"] for entry in graph.logits] == [named, ranked[0], ranked[1]]
    assert graph.target["id"] == named and graph.target["chosen"] == "named" and "weight" not in graph.target
    assert target_node(graph) == f"L_{named}"
    pruned = PrunedGraph(graph)
    assert pruned.ids[pruned.target] == f"L_{named}"
    assert {e["target"] for e in graph.lrp_edges} == {f"L_{named}"}  # LRP explains the target alone


def test_coverage_stops_adding_logits(tiny):
    """The nodes stop at the probability they cover, the target counted, and never exceed max_logits."""
    lm, tset = tiny
    probabilities = _next_token_probabilities(lm)
    ranked = torch.argsort(probabilities, descending=True).tolist()
    enough = float(probabilities[ranked[:2]].sum())
    graph = build_graph(lm, tset, TEXT, max_logits=10, logit_probability=enough - 1e-9, node_budget=10,
                        edge_budget=30, max_feature_nodes=10, lrp=None)
    assert [entry["id"] for entry in graph.logits] == ranked[:2]
    one = build_graph(lm, tset, TEXT, max_logits=1, node_budget=10, edge_budget=30, max_feature_nodes=10, lrp=None)
    assert one.logits is None and "logits" not in one.to_dict()  # one logit node: the field does not apply
    assert [n for n in one.nodes if n["kind"] == "logit"][0].keys().isdisjoint({"probability", "target"})


@pytest.mark.parametrize("settings, message", [
    (dict(max_logits=0), "max_logits"), (dict(max_logits=11), "max_logits"), (dict(max_logits=True), "max_logits"),
    (dict(max_logits=3, logit_probability=0.0), "logit_probability"),
    (dict(max_logits=3, logit_probability=1.5), "logit_probability"),
])
def test_bad_logit_settings_are_refused(tiny, settings, message):
    lm, tset = tiny
    with pytest.raises(InterpscopeError, match=message):
        build_graph(lm, tset, TEXT, lrp=None, **settings)


def test_neuronpedia_export_marks_the_target_among_the_logits(tiny):
    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, max_logits=3, logit_probability=1.0, node_budget=10, edge_budget=30,
                        max_feature_nodes=15, lrp=None)
    document = graph.to_neuronpedia("tiny")
    logits = [n for n in document["nodes"] if n["feature_type"] == "logit"]
    assert len(logits) == 3 and [n["is_target_logit"] for n in logits] == [True, False, False]
    assert [n["token_prob"] for n in logits] == pytest.approx([e["probability"] for e in graph.logits])
    assert [n["feature"] for n in logits] == [e["id"] for e in graph.logits]
    json.dumps(document)


def test_cli_top_logits_document_equals_api(folders):
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm, model_dir, set_dir = folders
    text = "The cat sat on the"
    result = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", text,
                      "--node-budget", "15", "--edge-budget", "40", "--max-feature-nodes", "20", "--dtype", "float64",
                      "--max-logits", "3", "--logit-probability", "1", "--lrp", "none", "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    api = build_graph(lm, load_transcoder_set(set_dir, lm=lm), text, node_budget=15, edge_budget=40,
                      max_feature_nodes=20, max_logits=3, logit_probability=1.0, lrp=None).to_dict()
    assert len(document["logits"]) == 3
    _assert_same(without_timings(document), without_timings(json.loads(json.dumps(api))))
    bad = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", text,
                   "--max-logits", "11")
    assert bad.returncode == 2 and "max_logits" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_figure_puts_the_logits_in_a_row_within_the_axis(tiny):
    from interpscope.figures.graphs import graph_figure, layout, logit_row

    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, max_logits=10, logit_probability=1.0, node_budget=10, edge_budget=30,
                        max_feature_nodes=10, lrp=None)
    logits = [n for n in graph.nodes if n["kind"] == "logit"]
    assert len(logits) == 10
    placed = layout(graph.nodes, lm.adapter.n_layers)
    spots = [placed[n["id"]] for n in logits]
    row = logit_row(lm.adapter.n_layers)  # a layer above the last one: clear of the last layer's features
    assert len(set(spots)) == 10 and {y for _, y in spots} == {row} and row > lm.adapter.n_layers - 1 + 0.3
    assert placed[target_node(graph)] == (float(len(graph.tokens) - 1), row)
    assert all(-0.7 <= x <= len(graph.tokens) - 0.3 for x, _ in spots)
    figure = graph_figure(graph.nodes, graph.edges, graph.tokens, lm.adapter.n_layers, "top logits")
    texts = [t for trace in figure.data if trace.name == "logit" for t in trace.text]
    assert len(texts) == 10 and all(" p 0." in t or " p 1." in t for t in texts)


# --- contrastive and listed targets ---------------------------------------------------------------------------------
def test_a_contrastive_graph_reproduces_the_logit_difference(tiny):
    """--target A --contrast B: one logit node, logit(A) - logit(B); the unpruned graph's contributions add up to it,
    each edge into it is the difference of the two one-logit graphs' edges, and its interventions and CP-LRP explain
    the difference too."""
    from interpscope.graphs.interventions import GraphRun

    lm, tset = tiny
    probabilities = _next_token_probabilities(lm)
    top, second = (int(t) for t in torch.argsort(probabilities, descending=True)[:2])
    both = build_graph(lm, tset, TEXT, target=f"#{top}", contrast=f"#{second}", **EVERYTHING)
    with torch.no_grad():
        from interpscope.graphs.defaults import MAX_TOKENS
        from interpscope.relevance.api import input_ids_for

        logits = lm.model(input_ids_for(lm, TEXT, max_tokens=MAX_TOKENS)[0]).logits[0, -1].double()
    difference = float(logits[top] - logits[second])
    assert both.logit == pytest.approx(difference, rel=1e-9)
    assert both.logit_inputs_sum == pytest.approx(difference, rel=1e-3, abs=1e-6)
    logit = both.node(target_node(both))
    assert logit["contrast"]["id"] == second and both.target["contrast"]["id"] == second and " − " in logit["token"]
    one = build_graph(lm, tset, TEXT, target=f"#{top}", **EVERYTHING)
    other = build_graph(lm, tset, TEXT, target=f"#{second}", **EVERYTHING)
    effect = {g: {n["id"]: n["logit_effect"] for n in graph.nodes if n["kind"] != "logit"}
              for g, graph in (("both", both), ("one", one), ("other", other))}
    for node, value in effect["both"].items():
        if node in effect["one"] and node in effect["other"]:
            assert value == pytest.approx(effect["one"][node] - effect["other"][node], rel=1e-6, abs=1e-9)
    prepared = GraphRun(lm, tset, both)
    feature = next(n for n in both.nodes if n["kind"] == "feature")
    (actual,), clean = prepared.actual([[feature]], 0.0)
    assert clean == pytest.approx(difference, rel=1e-6)
    (real_linear,) = prepared.predicted_real_linear([[feature]], 0.0)
    single = GraphRun(lm, tset, one)
    assert real_linear != pytest.approx(single.predicted_real_linear([[feature]], 0.0)[0], rel=1e-6)
    cp = build_graph(lm, tset, TEXT, target=f"#{top}", contrast=f"#{second}", max_feature_nodes=20, lrp="cplrp")
    lrp = {e["source"]: e["weight"] for e in cp.lrp_edges if e["target"] == target_node(cp)}
    for node in cp.nodes:
        if node["kind"] != "logit":
            assert lrp.get(node["id"], 0.0) == pytest.approx(node["logit_effect"], rel=1e-6, abs=1e-9)


def test_a_list_of_targets_is_weighted_by_probability_and_bad_combinations_are_refused(tiny):
    lm, tset = tiny
    probabilities = _next_token_probabilities(lm)
    picked = [int(t) for t in torch.argsort(probabilities, descending=True)[[0, 3, 5]]]
    graph = build_graph(lm, tset, TEXT, targets=[f"#{t}" for t in picked], **EVERYTHING)
    assert [e["id"] for e in graph.logits] == picked and graph.target["id"] == picked[0]
    weights = np.array([float(probabilities[t]) for t in picked])
    assert [e["weight"] for e in graph.logits] == pytest.approx(list(weights / weights.sum()), rel=1e-9)
    for entry in graph.logits:
        assert entry["logit_inputs_sum"] == pytest.approx(entry["logit"], rel=1e-3, abs=1e-6)
    for kwargs, message in ((dict(contrast="#1", max_logits=3), "contrast"), (dict(targets=["#1", "#1"]), "twice"),
                            (dict(targets=["#1"], max_logits=2), "not both"),
                            (dict(target="#2", contrast="#2"), "target itself")):
        with pytest.raises(InterpscopeError, match=message):
            build_graph(lm, tset, TEXT, **kwargs)
