"""Interventions on attribution graphs, the ablation check, edge heads and supernode grouping, on tiny Llamas.

The exact case: a 2-layer Llama with zero query and key weights (every attention pattern is the uniform causal one,
whatever the input), RMSNorms with a huge epsilon (the norm scale is a constant; the attention output and the
unembedding are scaled up by sqrt(eps) so effects stay of order 1) and a zero second MLP, with a second transcoder
whose features never fire: the replacement model's linear path is then the real model, and the
graph's predicted change of the logit must equal the real forward pass's for an ablation and for steering, sign and
magnitude. On an ordinary
tiny Llama (nonlinear attention and norms) the same code must NOT agree exactly: the comparison measures something.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.graphs.grouping import (
    agglomerate,
    group_by_contexts,
    group_by_decoder,
    group_edges,
    manual_group,
)
from interpscope.graphs.interventions import GraphRun, ablation_check, edge_heads, intervene, pearson
from interpscope.graphs.result import AttributionGraph, node_id
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.relevance.api import input_ids_for
from interpscope.sae.transcoder_set import random_transcoder_set
from tests.tiny import loaded

TEXT = "The cat sat on the mat and the dog"


def tiny_llama_lm(eps: float, seed: int = 0, exact: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=eps, tie_word_embeddings=False, initializer_range=0.3)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(torch.float64).eval()
    if exact:
        with torch.no_grad():
            for block in model.model.layers:
                block.self_attn.q_proj.weight.zero_()
                block.self_attn.k_proj.weight.zero_()
                block.self_attn.o_proj.weight.mul_(eps ** 0.5)
            model.lm_head.weight.mul_(eps ** 0.5)
            model.model.layers[1].mlp.down_proj.weight.zero_()
    return loaded(model, gpt2_tokenizer(), name=f"tiny-llama-eps{eps:g}")


def hand_graph(lm, tset, text: str = TEXT, per_layer: int = 12) -> AttributionGraph:
    """A graph of the strongest active features per layer with their real activations (no edges: the unpruned
    prediction does not read them), influence = activation."""
    from interpscope.capture import capture

    ids, _ = input_ids_for(lm, text)  # as build_graph tokenises (BOS first where the tokenizer adds none)
    names = [tset.hook_in_name(layer) for layer in range(tset.n_layers)]
    run = capture(lm.adapter, ids, names)
    logits = run.require_logits()[-1]
    target = int(logits.argmax())
    tokens = lm.token_strings(ids[0])
    nodes = []
    for layer in range(tset.n_layers):
        acts = tset[layer].encode(run.activations[names[layer]].to(tset[layer].W_enc.dtype)).detach()
        flat = torch.topk(acts.flatten(), per_layer)
        for value, index in zip(flat.values.tolist(), flat.indices.tolist(), strict=True):
            if value <= 0:
                continue
            position, feature = divmod(index, acts.shape[1])
            nodes.append({"id": node_id("feature", layer, position, feature), "kind": "feature", "layer": layer,
                          "position": position, "token": tokens[position], "feature": feature, "activation": value,
                          "influence": value})
    nodes.append({"id": node_id("logit", None, len(tokens) - 1, target), "kind": "logit", "layer": tset.n_layers,
                  "position": len(tokens) - 1, "token": lm.token_strings([target])[0], "feature": target,
                  "activation": float(logits[target])})
    return AttributionGraph(model=lm.name, transcoders="random", text=text, tokens=tokens,
                            target={"token": nodes[-1]["token"], "id": target, "probability": 0.0},
                            logit=float(logits[target]), logit_inputs_sum=float(logits[target]), nodes=nodes)


@pytest.fixture(scope="module")
def exact():
    lm = tiny_llama_lm(eps=1e6, exact=True)
    tset = random_transcoder_set(lm, width=32, seed=1)
    with torch.no_grad():
        tset[1].W_enc.zero_()  # the zero MLP does not respond; neither may its transcoder's features
        tset[1].b_enc.fill_(-1.0)  # (none is active: its output is a constant, the error node's)
    graph = hand_graph(lm, tset)
    return lm, tset, graph, GraphRun(lm, tset, graph)


def test_predicted_equals_actual_where_the_replacement_is_exact(exact):
    lm, tset, graph, prepared = exact
    layer0 = [n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0 and n["position"] < 8]
    assert layer0, "the random transcoder must have active features at layer 0"
    for node in layer0[:3]:
        result = intervene(lm, tset, graph, [node["id"]], prepared=prepared)
        assert abs(result.actual) > 1e-3  # a real effect, not 0 == 0
        assert np.sign(result.predicted) == np.sign(result.actual)
        assert result.predicted == pytest.approx(result.actual, rel=1e-4)
        steered = intervene(lm, tset, graph, [node["id"]], mode="steer", scale=3.0, prepared=prepared)
        assert steered.actual == pytest.approx(-2.0 * result.actual, rel=1e-4)  # (3 - 1) x minus the ablation
        assert steered.predicted == pytest.approx(steered.actual, rel=1e-4)
    both = intervene(lm, tset, graph, [n["id"] for n in layer0[:2]], label="pair", prepared=prepared)
    assert both.predicted == pytest.approx(both.actual, rel=1e-4)
    assert both.nodes == [n["id"] for n in layer0[:2]] and both.label == "pair"
    assert "the graph predicts it within 10%" in both.summary()


def test_the_ablation_check_on_the_exact_model_and_its_control(exact):
    lm, tset, graph, prepared = exact
    check = ablation_check(lm, tset, graph, n=4, seed=0, prepared=prepared)
    strongest = [r for r in check.rows if r["set"] == "strongest"]
    control = [r for r in check.rows if r["set"] == "random"]
    assert len(strongest) == 4 and len(control) == 4
    assert not {tuple(r["nodes"]) for r in strongest} & {tuple(r["nodes"]) for r in control}
    in_graph = {n["id"] for n in graph.nodes}
    assert any(r["nodes"][0] not in in_graph for r in control)  # drawn from every active feature, pruned or not
    for row in control:
        layer, feature, position = (int(x) for x in row["nodes"][0][1:].split("_"))
        assert prepared.acts[layer][position, feature] > 0
    influences = sorted((n["influence"] for n in graph.nodes if n["kind"] == "feature"), reverse=True)
    assert [r["influence"] for r in strongest] == pytest.approx(influences[:4])
    assert check.r is not None and check.r > 0.999
    assert check.r_control is not None
    assert check.r == pytest.approx(pearson([r["predicted"] for r in strongest], [r["actual"] for r in strongest]))
    doc = check.to_dict()
    assert doc["schema"] == "interpscope.graph.ablation_check" and len(doc["rows"]) == 8
    title = check.figure().layout.title.text
    assert f"r = {check.r:.2f}" in title and "control" in title


def test_a_nonlinear_model_is_not_predicted_exactly():
    lm = tiny_llama_lm(eps=1e-6)
    tset = random_transcoder_set(lm, width=32, seed=1)
    graph = hand_graph(lm, tset)
    prepared = GraphRun(lm, tset, graph)
    gaps = []
    for node in [n for n in graph.nodes if n["kind"] == "feature"][:4]:
        result = intervene(lm, tset, graph, [node["id"]], prepared=prepared)
        gaps.append(abs(result.predicted - result.actual) / max(abs(result.actual), 1e-9))
    assert max(gaps) > 1e-2  # frozen patterns and norms are an approximation here


def test_the_ablation_check_names_the_last_block_rows_and_their_r_apart():
    """In an ordinary (nonlinear) tiny Llama: rows of last-block features are flagged and predicted to float
    rounding, the others are not exact, and r_beyond_last_layer is r over the unflagged strongest rows alone."""
    lm = tiny_llama_lm(eps=1e-6)
    tset = random_transcoder_set(lm, width=32, seed=1)
    graph = hand_graph(lm, tset, per_layer=6)
    last = lm.adapter.n_layers - 1
    check = ablation_check(lm, tset, graph, n=len([n for n in graph.nodes if n["kind"] == "feature"]))
    strongest = [r for r in check.rows if r["set"] == "strongest"]
    flagged = [r for r in strongest if r.get("last_layer")]
    others = [r for r in strongest if not r.get("last_layer")]
    assert flagged and len(others) >= 3 and check.n_last_layer == len(flagged)
    layer_of = {n["id"]: n["layer"] for n in graph.nodes}
    for row in flagged:
        assert all(layer_of[i] == last for i in row["nodes"])
        assert row["predicted"] == pytest.approx(row["actual"], rel=1e-4, abs=1e-6)
    assert all(any(layer_of[i] < last for i in row["nodes"]) for row in others)
    assert max(abs(r["predicted"] - r["actual"]) / max(abs(r["actual"]), 1e-9) for r in others) > 1e-2
    assert check.r_beyond_last_layer == pytest.approx(pearson([r["predicted"] for r in others],
                                                              [r["actual"] for r in others]))
    assert f"{len(flagged)} of the {len(strongest)} strongest are last-block features" in check.summary()
    assert "last_layer" not in {k for r in others for k in r}  # absent where it does not apply, never false
    figure = check.figure()
    traces = {trace.name: trace for trace in figure.data}
    assert len(traces["strongest nodes, last block (exact by construction)"].x) == len(flagged)
    assert len(traces["strongest nodes, before the last block"].x) == len(others)
    assert f"{check.r_beyond_last_layer:.2f} (strongest before the last block)" in figure.layout.title.text


def test_interventions_refuse_what_they_cannot_do(exact):
    lm, tset, graph, prepared = exact
    logit = [n["id"] for n in graph.nodes if n["kind"] == "logit"]
    with pytest.raises(InterpscopeError, match="Only feature nodes"):
        intervene(lm, tset, graph, logit, prepared=prepared)
    with pytest.raises(InterpscopeError, match="Not nodes of this graph"):
        intervene(lm, tset, graph, ["F9_9_9"], prepared=prepared)
    with pytest.raises(InterpscopeError, match="finite factor"):
        intervene(lm, tset, graph, [graph.nodes[0]["id"]], mode="steer", scale=float("nan"), prepared=prepared)
    with pytest.raises(InterpscopeError, match="Unknown intervention"):
        intervene(lm, tset, graph, [graph.nodes[0]["id"]], mode="zap", prepared=prepared)


def test_edge_heads_sum_to_the_direct_effect(exact):
    """Feature -> logit at another position has no residual path: the one-hop head parts plus the rest equal the
    linear replay's direct effect, and in a 2-layer model with the source at layer 0 only layer 1's heads carry
    it (no two-hop path), so the rest is ~0."""
    lm, tset, graph, prepared = exact
    source = next(n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0 and n["position"] < 8)
    logit = next(n for n in graph.nodes if n["kind"] == "logit")
    run = prepared.run
    write = source["activation"] * tset[0].W_dec[source["feature"]].detach().to(run.dtype)
    from interpscope.graphs.replay import attention_forward

    dx = torch.zeros(run.n_tokens, run.W_E.shape[1], dtype=run.dtype)
    dx[source["position"]] = write
    moved = attention_forward(run, 1, dx)  # the only attention after layer 0's MLP
    direct = float(moved[-1] @ run.logit_direction(int(graph.target["id"])))
    graph.edges = [{"source": source["id"], "target": logit["id"], "weight": direct}]
    split = edge_heads(run, tset, graph, source["id"], logit["id"], top=100)
    assert {h["layer"] for h in split.heads} == {1} and len(split.heads) == 4
    assert split.residual == 0.0
    assert split.one_hop_total == pytest.approx(direct, rel=1e-9)
    assert split.rest == pytest.approx(0.0, abs=1e-9 * max(abs(direct), 1e-12))
    top = max(split.heads, key=lambda h: abs(h["part"]))
    assert split.heads[0] == top and f"L1.H{top['head']}" in split.summary()
    graph.edges = []


# --- supernodes --------------------------------------------------------------------------------------------------
class Planted:
    """A stand-in transcoder set: layer -> an object with W_dec."""

    def __init__(self, rows: dict[int, torch.Tensor]):
        self.layers = {layer: type("T", (), {"W_dec": w})() for layer, w in rows.items()}

    def __getitem__(self, layer: int):
        return self.layers[layer]


def feature(layer: int, f: int, position: int) -> dict:
    return {"id": node_id("feature", layer, position, f), "kind": "feature", "layer": layer, "position": position,
            "feature": f, "influence": 1.0}


def test_identical_decoders_group_and_orthogonal_ones_do_not():
    W0 = torch.eye(4, 8)  # features 0..3 of layer 0: orthonormal directions
    W1 = torch.zeros(2, 8)
    W1[0] = 3.0 * W0[1]  # layer 1 feature 0 writes feature (0, 1)'s direction, scaled
    W1[1, 7] = 1.0  # orthogonal to everything
    tset = Planted({0: W0, 1: W1})
    nodes = [feature(0, 0, 1), feature(0, 1, 2), feature(0, 2, 2), feature(1, 0, 3), feature(1, 1, 3),
             {"id": "E_0", "kind": "embedding", "layer": -1, "position": 0}]
    groups = group_by_decoder(nodes, tset, threshold=0.9)
    assert [sorted(g.members) for g in groups] == [sorted(["F0_1_2", "F1_0_3"])]
    assert groups[0].label == "L0–L1" and groups[0].layers == [0, 1]
    every = group_by_decoder(nodes, tset, threshold=0.9, singletons=True)
    assert sum(len(g.members) for g in every) == 5  # every feature node once; the embedding never
    assert group_by_decoder(nodes, tset, threshold=-1.0)[0].members.__len__() == 5  # any threshold merges all
    labelled = group_by_decoder(nodes, tset, 0.9, tokens_of=lambda n: [" Paris", " France"] if n["layer"] else
                                [" Paris"])
    assert labelled[0].label == "' Paris' · L0–L1"


def test_context_grouping_manual_groups_and_summed_edges():
    nodes = [feature(0, 0, 1), feature(0, 1, 2), feature(1, 5, 2)]
    contexts = {"F0_0_1": ["cat", "dog", "cow"], "F0_1_2": ["cat", "dog", "pig"], "F1_5_2": ["1", "2", "3"]}
    groups = group_by_contexts(nodes, lambda n: contexts[n["id"]], threshold=0.4)
    assert [g.members for g in groups] == [["F0_0_1", "F0_1_2"]]
    assert groups[0].label.startswith("'cat' / 'dog'")
    manual = manual_group(nodes, ["F0_0_1", "F1_5_2"], index=2)
    assert manual.id == "manual-2" and manual.how == "selected"
    with pytest.raises(InterpscopeError, match="Not nodes"):
        manual_group(nodes, ["nope"])
    edges = [{"source": "F0_0_1", "target": "L_5", "weight": 1.0}, {"source": "F1_5_2", "target": "L_5", "weight": 0.5},
             {"source": "F0_0_1", "target": "F1_5_2", "weight": 2.0}, {"source": "E_0", "target": "F0_0_1",
                                                                       "weight": -0.25}]
    merged = group_edges(edges, [manual])
    assert merged == [{"source": "manual-2", "target": "L_5", "weight": 1.5},
                      {"source": "E_0", "target": "manual-2", "weight": -0.25}]


def test_agglomerate_uses_average_linkage():
    sim = np.array([[1.0, 0.9, 0.2], [0.9, 1.0, 0.8], [0.2, 0.8, 1.0]])
    assert agglomerate(sim, 0.85) == [[0, 1], [2]]
    assert agglomerate(sim, 0.5) == [[0, 1, 2]]  # mean of 0.2 and 0.8 is 0.5
    assert agglomerate(sim, 0.51) == [[0, 1], [2]]


def test_the_replay_agrees_with_the_built_graphs_direct_effects():
    """On a built graph (interpscope.graphs.build_graph) of an ordinary tiny Llama: with the other features held,
    ablating a feature node moves the logit by minus its direct effect, the graph's own edge into the logit (two
    implementations of the frozen linear model agree); with them following, the pruned graph's prediction of a
    last-layer node (no feature downstream) is that edge too."""
    from interpscope.graphs.build import build_graph

    lm = tiny_llama_lm(eps=1e-6)
    tset = random_transcoder_set(lm, width=32, seed=1)
    graph = build_graph(lm, tset, TEXT, node_budget=30, edge_budget=100)
    prepared = GraphRun(lm, tset, graph)
    features = [n for n in graph.nodes if n["kind"] == "feature"]
    assert len(features) >= 5
    direct = prepared.predicted_linear([[n] for n in features], 0.0, direct_only=True)
    assert direct == pytest.approx([-n["logit_effect"] for n in features], rel=1e-6, abs=1e-9)
    logit = next(n["id"] for n in graph.nodes if n["kind"] == "logit")
    into = {e["source"]: e["weight"] for e in graph.edges if e["target"] == logit}
    last = [n for n in features if n["layer"] == lm.adapter.n_layers - 1 and n["id"] in into]
    assert last
    for node in last:
        assert prepared.pruned.predicted([node["id"]], 0.0) == pytest.approx(-into[node["id"]], rel=1e-9)
        assert prepared.predicted_linear([[node]], 0.0)[0] == pytest.approx(-into[node["id"]], rel=1e-6)


def test_decoder_top_tokens_find_a_planted_logit_direction():
    from interpscope.graphs.grouping import decoder_top_tokens

    lm = tiny_llama_lm(eps=1e-6)
    tset = random_transcoder_set(lm, width=8, seed=2)
    with torch.no_grad():
        lm.model.lm_head.weight[4242] *= 10.0  # (in 16 dimensions many of 50k tokens point alike: stand out)
    W_U = lm.adapter.folded_unembedding(torch.float32)
    with torch.no_grad():
        tset[1].W_dec[5] = W_U[:, 4242] / W_U[:, 4242].norm()  # writes exactly token 4242's (folded) direction
    nodes = [feature(1, 5, 0), feature(0, 5, 0), {"id": "E_0", "kind": "embedding", "layer": -1, "position": 0}]
    tokens = decoder_top_tokens(lm, tset, nodes, k=3)
    assert set(tokens) == {"F1_5_0", "F0_5_0"}
    assert tokens["F1_5_0"][0][0] == lm.token_strings([4242])[0]
    assert tokens["F1_5_0"][0][1] == pytest.approx(float(W_U[:, 4242].norm()), rel=1e-5)
    assert len(tokens["F0_5_0"]) == 3


def test_an_error_nodes_write_is_the_engines_error_node(exact):
    """The per-head split writes an error node as the engine defines it: mlp_out - sum_i a_i W_dec[i], which holds
    the transcoder's b_dec (with b_dec nonzero, decode(encode(x)) would be off by exactly b_dec)."""
    from interpscope.graphs.engine import replacement
    from interpscope.graphs.interventions import _writes

    lm, tset, graph, prepared = exact
    run = prepared.run
    saved = [tc.b_dec.detach().clone() for tc in tset.transcoders]
    try:
        with torch.no_grad():
            for tc in tset.transcoders:
                tc.b_dec.normal_()
        rep = replacement(run, tset.transcoders, [])
        for layer in range(tset.n_layers):
            node = {"id": f"E_{layer}_2", "kind": "error", "layer": layer, "position": 2}
            torch.testing.assert_close(_writes(run, tset, node), rep.errors[layer, 2], rtol=1e-5, atol=1e-6)
    finally:
        with torch.no_grad():
            for tc, b in zip(tset.transcoders, saved, strict=True):
                tc.b_dec.copy_(b)


# --- diagnostic readouts: the real model with parts of the replacement model imposed -----------------------------
def all_active_set(lm, width: int = 32, seed: int = 1):
    """Random float64 transcoders whose every feature fires at every position (a large encoder bias): the ReLU
    never crosses zero, so the replacement model is exactly linear in the features."""
    tset = random_transcoder_set(lm, width=width, seed=seed)
    for tc in tset.transcoders:
        tc.double()
        with torch.no_grad():
            tc.b_enc.fill_(50.0)
    return tset


def test_the_local_replacement_readout_is_what_the_graph_predicts():
    """On an ordinary tiny Llama (softmax attention, RMSNorms that move) whose transcoders never switch a feature
    off, the real model with attention patterns and norm scales frozen and its MLPs replaced by transcoders + the
    constant error node IS the graph's linear model: predicted == that readout to 1e-6 for ablations, pairs and
    steering, while the plain real forward pass differs (the readout imposes something)."""
    lm = tiny_llama_lm(eps=1e-6)
    tset = all_active_set(lm)
    graph = hand_graph(lm, tset, per_layer=4)
    prepared = GraphRun(lm, tset, graph)
    nodes = [n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0][:4]
    sets = [[n] for n in nodes] + [nodes[:2]]
    predicted = prepared.predicted_linear(sets, 0.0)  # the replacement readout freezes the final norm too
    replaced, clean = prepared.actual(sets, 0.0, freeze=("final_norm", "norms", "attention", "mlps"))
    real, real_clean = prepared.actual(sets, 0.0)
    assert min(abs(v) for v in replaced) > 1e-3  # real effects, not 0 == 0
    assert replaced == pytest.approx(predicted, rel=1e-6, abs=1e-9)
    assert clean == pytest.approx(real_clean, rel=1e-6)  # the clean row of the readout is the clean model
    assert max(abs(a - p) / abs(p) for a, p in zip(real, predicted, strict=True)) > 1e-2
    steered, _ = prepared.actual(sets[:1], 3.0, freeze=("final_norm", "norms", "attention", "mlps"))
    assert steered[0] == pytest.approx(prepared.predicted_linear(sets[:1], 3.0)[0], rel=1e-6)
    from interpscope.capture import editing

    assert not editing(lm.model)  # every freeze hook is gone after the passes


def test_frozen_attention_and_norms_leave_only_the_attention_paths():
    """With the MLPs zero (nothing responds) and attention patterns and norm scales frozen, the real forward pass is
    linear: ablating a feature moves the logit by exactly the graph's direct-only replay (the other features held);
    with the patterns and norms live it does not. A last-layer feature at the last position has only the final norm
    after it: the all-linear prediction is exact once that norm's scale is frozen, and `predicted` (the graph's
    residual change through the live final norm) is exact in the real model, nothing frozen."""
    lm = tiny_llama_lm(eps=1e-6, seed=3)
    with torch.no_grad():
        for block in lm.model.model.layers:
            block.mlp.down_proj.weight.zero_()
    tset = random_transcoder_set(lm, width=32, seed=1)
    graph = hand_graph(lm, tset)
    prepared = GraphRun(lm, tset, graph)
    early = [[n] for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0][:4]
    assert early
    held = prepared.predicted_linear(early, 0.0, direct_only=True)
    frozen_run, _ = prepared.actual(early, 0.0, freeze=("final_norm", "norms", "attention"))
    assert min(abs(v) for v in frozen_run) > 1e-4
    assert frozen_run == pytest.approx(held, rel=1e-6, abs=1e-9)
    live, _ = prepared.actual(early, 0.0)
    assert max(abs(a - p) / abs(p) for a, p in zip(live, held, strict=True)) > 1e-3
    last = len(graph.tokens) - 1
    firing = prepared.acts[1][last].nonzero().flatten().tolist()
    assert firing, "a layer-1 feature must fire at the last position"
    top = [{"id": node_id("feature", 1, last, firing[0]), "kind": "feature", "layer": 1, "position": last,
            "feature": firing[0], "activation": float(prepared.acts[1][last, firing[0]])}]
    for factor in (0.0, 3.0):
        only_norm, _ = prepared.actual([top], factor, freeze=("final_norm",))
        assert only_norm[0] == pytest.approx(prepared.predicted_linear([top], factor)[0], rel=1e-6)
        real_last, _ = prepared.actual([top], factor)
        # (rel 1e-4: the model's own RMSNorm computes in float32 even in this float64 model)
        assert real_last[0] == pytest.approx(prepared.predicted([top], factor)[0], rel=1e-4)
        assert abs(real_last[0] - only_norm[0]) > 1e-3 * abs(real_last[0])  # the live final norm does move it


def test_the_ablation_check_reports_labelled_readouts(exact):
    lm, tset, graph, prepared = exact
    steps: list[tuple[int, int]] = []
    check = ablation_check(lm, tset, graph, n=3, seed=0, prepared=prepared,
                           readouts=["attention_norms_frozen", "replacement"], progress=lambda *a: steps.append(a))
    assert steps == [(1, 3), (2, 3), (3, 3)]  # one bar over the real passes and both readouts (6 rows: one batch)
    assert set(check.r_readouts or {}) == {"attention_norms_frozen", "replacement"}
    assert set(check.r_readouts_control or {}) == {"attention_norms_frozen", "replacement"}
    for row in check.rows:
        assert set(row["readouts"]) == {"attention_norms_frozen", "replacement"}
        # this model has uniform attention and constant norm scales: freezing them changes nothing
        assert row["readouts"]["attention_norms_frozen"] == pytest.approx(row["actual"], rel=1e-4, abs=1e-9)
    summary = check.summary()
    assert "Diagnostic readouts, not the real model" in summary and "circuit-tracer" in summary
    assert f"r = {check.r:.2f}" in summary
    doc = check.to_dict()
    assert doc["r_readouts"] == check.r_readouts and doc["r"] == check.r  # the real r stays the figure of merit
    assert "readout: replacement" in check.tidy()[0]
    plain = ablation_check(lm, tset, graph, n=3, seed=0, prepared=prepared).to_dict()
    assert "r_readouts" not in plain and "readouts" not in plain["rows"][0]  # absent, never empty or 0
    with pytest.raises(InterpscopeError, match="Unknown readout"):
        ablation_check(lm, tset, graph, n=3, prepared=prepared, readouts=["softmax_frozen"])
    with pytest.raises(InterpscopeError, match="Unknown part"):
        prepared.actual([[graph.nodes[0]]], 0.0, freeze=("layernorms",))


def test_the_real_models_first_order_estimate_is_its_gradient():
    """predicted_real_linear is the real model's own linearisation: on an ordinary (nonlinear) tiny Llama a tiny
    steer (x 1.001) moves the real logit by what it says to first order, a full ablation does not match it
    exactly (it is an estimate), and with every part of the replacement model imposed it IS the graph's all-linear
    prediction (the graph is the exact linearisation of the local replacement model). Memoised per freeze set."""
    from interpscope.graphs.freeze import PARTS

    lm = tiny_llama_lm(eps=1e-6)
    tset = random_transcoder_set(lm, width=32, seed=1)
    graph = hand_graph(lm, tset, per_layer=4)
    prepared = GraphRun(lm, tset, graph)
    sets = [[n] for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0][:4]
    assert len(sets) == 4
    eps = 0.01  # central difference: the second-order terms cancel (the norms compute in float32: no tiny eps)
    estimate = prepared.predicted_real_linear(sets, 1.0 + eps)
    up, _ = prepared.actual(sets, 1.0 + eps)
    down, _ = prepared.actual(sets, 1.0 - eps)
    assert max(abs(e) for e in estimate) > 1e-4  # a real effect, not 0 == 0
    for e, a, b in zip(estimate, up, down, strict=True):
        assert e == pytest.approx((a - b) / 2, rel=2e-2, abs=1e-6)
    ablated_estimate = prepared.predicted_real_linear(sets, 0.0)
    assert ablated_estimate == pytest.approx([e / -eps for e in estimate], rel=1e-9)  # linear in the edit
    ablated, _ = prepared.actual(sets, 0.0)
    assert max(abs(e - a) / max(abs(a), 1e-9) for e, a in zip(ablated_estimate, ablated, strict=True)) > 1e-3
    replacement = prepared.predicted_real_linear(sets, 0.0, freeze=PARTS)
    assert replacement == pytest.approx(prepared.predicted_linear(sets, 0.0), rel=1e-6, abs=1e-9)
    assert max(abs(r - e) for r, e in zip(replacement, ablated_estimate, strict=True)) > 1e-4  # freezing matters
    assert prepared.real_gradients(PARTS) is prepared.real_gradients(list(reversed(PARTS)))


def test_the_ablation_check_and_interventions_carry_the_real_estimate(exact):
    """On the exact model the real model is linear in the edit, so its first-order estimate equals the real change;
    the check's r over it, its sentence, the scatter's reference trace and an intervention's field all carry it."""
    lm, tset, graph, prepared = exact
    check = ablation_check(lm, tset, graph, n=4, seed=0, prepared=prepared)
    for row in check.rows:
        # (to float32 rounding: the model's norms compute in float32 even in this float64 model)
        assert row["predicted_real_linear"] == pytest.approx(row["actual"], rel=1e-3, abs=1e-7)
    strongest = [r for r in check.rows if r["set"] == "strongest"]
    assert check.r_real_linear == pytest.approx(pearson([r["predicted_real_linear"] for r in strongest],
                                                        [r["actual"] for r in strongest]))
    doc = check.to_dict()
    assert doc["schema_version"] == 4 and doc["r_real_linear"] == check.r_real_linear
    assert f"reaches r = {check.r_real_linear:.2f} on the strongest" in check.summary()
    # the ceiling under the graph's frozen convention (patterns and norm scales fixed, real MLPs): this model's
    # patterns and norm scales do not move, so freezing them changes nothing and it is the real change too
    for row in check.rows:
        assert row["predicted_frozen_linear"] == pytest.approx(row["actual"], rel=1e-3, abs=1e-7)
    assert check.r_frozen_linear == pytest.approx(pearson([r["predicted_frozen_linear"] for r in strongest],
                                                          [r["actual"] for r in strongest]))
    assert f"real MLPs reaches r = {check.r_frozen_linear:.2f}: the ceiling" in check.summary()
    trace = next(t for t in check.figure().data if "first-order estimate" in (t.name or ""))
    assert trace.visible == "legendonly" and list(trace.x) == [r["predicted_real_linear"] for r in strongest]
    node = strongest[0]["nodes"][0]
    result = intervene(lm, tset, graph, [node], prepared=prepared)
    assert result.predicted_real_linear == pytest.approx(result.actual, rel=1e-3)
    assert result.to_dict()["schema_version"] == 3
    assert f"{result.predicted_real_linear:+.3f}" in result.summary()


def test_the_check_says_what_the_real_estimate_means_from_the_numbers():
    """The clause after the real estimate's r follows the numbers: graph misses and the estimate meets -> the
    graph's own miss; both miss -> a non-linear answer; the graph meets where the estimate misses -> the graph
    does better; both meet -> no verdict."""
    from interpscope.graphs.interventions import AblationCheck

    def said(r: float, real: float) -> str:
        return AblationCheck(model="m", text="t", target={}, n=1, r=r, r_real_linear=real).summary()
    assert "the graph's miss is its own" in said(0.3, 0.95)
    assert "answers these ablations non-linearly" in said(0.3, 0.5)
    assert "does better than the real model's own first-order estimate" in said(0.9, 0.3)
    assert "non-linearly" not in said(0.9, 0.3)
    both = said(0.9, 0.95)
    assert "miss is its own" not in both and "non-linearly" not in both and "reaches r = 0.95" in both
    assert "first-order" not in AblationCheck(model="m", text="t", target={}, n=1, r=0.9).summary()


def test_active_feature_rebuilds_a_member_and_refuses_the_rest(exact):
    lm, tset, graph, prepared = exact
    node = next(n for n in graph.nodes if n["kind"] == "feature")
    member = prepared.active_feature(node["id"])
    keys = ("layer", "position", "feature")
    assert {k: member[k] for k in keys} == {k: node[k] for k in keys}
    assert member["activation"] == pytest.approx(node["activation"], rel=1e-6)
    # (the run's dtype, float64 here, as build_graph encodes; this hand-made graph's activations are float32)
    assert prepared.predicted_real_linear([[member]], 0.0) == pytest.approx(
        prepared.predicted_real_linear([[node]], 0.0), rel=1e-6)
    inactive = next((L, p, f) for L, a in enumerate(prepared.active) for p, f in (~a).nonzero().tolist())
    for bad in (f"F{inactive[0]}_{inactive[2]}_{inactive[1]}", "F0_99999_0", "R0_1", "F0_x_1", "E_3"):
        with pytest.raises(InterpscopeError):
            prepared.active_feature(bad)
