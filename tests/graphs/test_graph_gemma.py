"""Attribution graphs on Gemma 3's block (tiny, float64): sandwich norms (a norm on each sub-layer's output),
(1 + w) RMSNorms, sqrt(d_model)-scaled embeddings, q/k norms, and transcoders with a skip connection (Gemma Scope 2's
affine transcoders). The frozen replay's backward equals autograd through its forward, the replay reproduces the
real logits, the graph's contributions add up to the logit and to every feature's pre-activation, CP-LRP equals the
direct effects, the real model with the replacement model's assumptions imposed IS the graph's linear prediction,
and edges split by head sum to their direct effect."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import model_lock
from interpscope.graphs import build_graph
from interpscope.graphs.engine import compute_rows, feature_reads, logit_reads, replacement
from interpscope.graphs.interventions import GraphRun, edge_heads
from interpscope.graphs.replay import Reads, final_logits, linear_backward, record, replay_forward
from tests.graphs.test_graph_interventions import hand_graph
from tests.graphs.test_graphs import TEXT, _lm, _sparse_set
from tests.tiny import relevance_model


def _with_skip(tset, scale: float = 0.3, seed: int = 5):
    """Give every transcoder of the set a random skip connection W_skip [d, d] (an affine transcoder)."""
    generator = torch.Generator().manual_seed(seed)
    for tc in tset.transcoders:
        d = tc.cfg.d_in
        tc.W_skip = torch.nn.Parameter(scale * torch.randn(d, tc.d_out, generator=generator, dtype=tc.W_enc.dtype))
    return tset


@pytest.fixture(scope="module")
def gemma():
    lm = _lm(relevance_model("gemma3", seed=2), name="tiny-gemma3")
    assert lm.adapter.attention_output_norm(0) is not None and lm.adapter.mlp_output_norm(0) is not None
    return lm, _with_skip(_sparse_set(lm))


def test_the_replay_freezes_sandwich_norms_and_scaled_embeddings(gemma):
    lm, tset = gemma
    with model_lock(lm):
        ids = lm.encode(TEXT)
        run = record(lm, ids)
        real = lm.model(input_ids=ids).logits[0, -1]
    assert run.embed_scale == pytest.approx(lm.adapter.d_model ** 0.5, rel=1e-6)  # Gemma's sqrt(d_model)
    assert run.attn_out_scale is not None and run.mlp_out_scale is not None
    torch.testing.assert_close(run.embedding_rows(), run.resid_pre[0], rtol=1e-9, atol=1e-12)
    points = replay_forward(run, run.resid_pre[0], run.mlp_out)
    # every residual point of the real run, not only the end (Gemma's RMSNorm computes in float32 even in a
    # float64 model, so the real run itself is float32-exact there)
    for layer in range(run.n_layers):
        torch.testing.assert_close(points[2 * layer + 1], run.resid_mid[layer], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final_logits(run, points[-1]), real.detach(), rtol=1e-5, atol=1e-5)


def test_batched_backward_equals_autograd_through_the_skips(gemma):
    lm, tset = gemma
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    rep = replacement(run, tset.transcoders, [])
    assert rep.has_skips
    columns = [int(c) for c in np.flatnonzero(rep.features.position.numpy() > 2)[::5][:6]]
    reads, more = logit_reads(rep, [5]), feature_reads(rep, columns)
    batch = Reads(reads.layers + more.layers, reads.positions + more.positions,
                  torch.cat([reads.directions, more.directions]))
    got: dict = {}
    linear_backward(run, batch, lambda layer, G: got.__setitem__(layer, G.clone()),
                    lambda G: got.__setitem__("embed", G.clone()), skips=rep.skips)
    for b in range(batch.size):
        embeds = run.resid_pre[0].clone().requires_grad_(True)
        outs = [o.clone().requires_grad_(True) for o in run.mlp_out]
        points = replay_forward(run, embeds, outs, rep.skips)
        layer, position = batch.layers[b], batch.positions[b]
        read_at = points[-1] if layer == run.n_layers else points[2 * layer + 1]
        grads = torch.autograd.grad(read_at[position] @ batch.directions[b], [embeds, *outs], allow_unused=True)
        P = got["embed"].shape[1]
        torch.testing.assert_close(got["embed"][b], grads[0][:P], rtol=1e-9, atol=1e-12)
        for L in range(min(layer, run.n_layers)):
            torch.testing.assert_close(got[L][b], grads[1 + L][:P], rtol=1e-9, atol=1e-12)


def test_the_unpruned_graph_adds_up_to_the_logit_and_the_preactivations(gemma):
    lm, tset = gemma
    graph = build_graph(lm, tset, TEXT, max_feature_nodes=10_000, node_budget=10_000, edge_budget=10**6, lrp=None)
    assert graph.bias_sum is None
    assert graph.logit_inputs_sum == pytest.approx(graph.logit, rel=1e-6, abs=1e-9)
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    rep = replacement(run, tset.transcoders, [])
    # the skip's write is a path, not part of an error node: the error is what neither features nor skip write
    x_in = run.mlp_in[1]
    written = tset[1].encode(x_in) @ tset[1].W_dec.detach() + x_in @ tset[1].W_skip.detach()
    torch.testing.assert_close(rep.errors[1], run.mlp_out[1] - written, rtol=1e-9, atol=1e-12)
    columns = [int(c) for c in range(rep.features.starts[1], rep.n_features, 3)][:10]
    assert columns
    rows = compute_rows(rep, feature_reads(rep, columns))
    for row, column in zip(rows.weights, columns, strict=True):
        layer, feature = int(rep.features.layer[column]), int(rep.features.feature[column])
        # rel 1e-5: Gemma's norms compute in float32 inside a float64 model (the real mlp_in is float32-exact)
        assert row.sum() + float(rep.b_enc(layer)[feature]) == pytest.approx(rep.pre_activation(column), rel=1e-5)


def test_cplrp_through_the_skips_equals_the_direct_effects(gemma):
    lm, tset = gemma
    cp = build_graph(lm, tset, TEXT, max_feature_nodes=20, lrp="cplrp")
    logit = next(n["id"] for n in cp.nodes if n["kind"] == "logit")
    lrp = {e["source"]: e["weight"] for e in cp.lrp_edges if e["target"] == logit}
    for node in cp.nodes:
        if node["kind"] != "logit":
            assert lrp.get(node["id"], 0.0) == pytest.approx(node["logit_effect"], rel=1e-5, abs=1e-8)  # float32 norms


def test_the_local_replacement_readout_is_the_graphs_prediction_on_gemma():
    """Every feature active (large encoder bias: no ReLU crosses), skip connections, sandwich norms: the real model
    with patterns and every norm scale (the output norms too) frozen and each MLP + its output norm replaced by
    transcoder + skip + constant error IS the graph's linear model; the plain real pass differs."""
    lm = _lm(relevance_model("gemma3", seed=3), name="tiny-gemma3")
    tset = _with_skip(_sparse_set(lm, width=24, density=1.0), scale=0.2)
    for tc in tset.transcoders:
        with torch.no_grad():
            tc.b_enc.fill_(50.0)
    graph = hand_graph(lm, tset, text=TEXT, per_layer=4)
    prepared = GraphRun(lm, tset, graph)
    nodes = [n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0][:4]
    sets = [[n] for n in nodes] + [nodes[:2]]
    predicted = prepared.predicted_linear(sets, 0.0)
    replaced, clean = prepared.actual(sets, 0.0, freeze=("final_norm", "norms", "attention", "mlps"))
    real, _ = prepared.actual(sets, 0.0)
    assert min(abs(v) for v in replaced) > 1e-4
    assert replaced == pytest.approx(predicted, rel=1e-6, abs=1e-9)
    assert max(abs(a - p) / abs(p) for a, p in zip(real, predicted, strict=True)) > 1e-3


def test_edge_heads_sum_to_the_replays_effect_through_the_output_norm(gemma):
    lm, tset = gemma
    graph = build_graph(lm, tset, TEXT, max_feature_nodes=30, lrp=None)
    logit = next(n for n in graph.nodes if n["kind"] == "logit")
    source = next(n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0
                  and n["position"] < logit["position"])
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    from interpscope.graphs.replay import attention_forward

    dx = torch.zeros(run.n_tokens, run.W_E.shape[1], dtype=run.dtype)
    dx[source["position"]] = source["activation"] * tset[0].W_dec[source["feature"]].detach()
    one_hop = float(attention_forward(run, 1, dx)[-1] @ run.logit_direction(int(graph.target["id"])))
    split = edge_heads(run, tset, graph, source["id"], logit["id"], top=100)
    # layer 1's heads carry the one-hop part, each through layer 1's frozen output norm at the query position
    assert {h["layer"] for h in split.heads} == {1}
    assert split.residual == 0.0
    assert split.one_hop_total == pytest.approx(one_hop, rel=1e-9, abs=1e-12)
    assert abs(one_hop) > 1e-6


def _jumprelu_skip_set(lm, width: int = 24, seed: int = 0):
    """A set of JumpReLU transcoders with skip connections (the Gemma Scope 2 affine form), random but with some
    features firing on TEXT."""
    from interpscope.sae.transcoder_set import TranscoderSet, new_transcoder

    generator = torch.Generator().manual_seed(seed)
    transcoders = []
    for layer in range(lm.adapter.n_layers):
        tc = new_transcoder(lm, layer, width, seed=seed + layer, architecture="jumprelu_transcoder", skip=True)
        tc.double()
        with torch.no_grad():
            tc.W_enc.normal_(0.0, 0.5, generator=generator)
            tc.b_enc.normal_(0.0, 0.2, generator=generator)
            tc.threshold.uniform_(0.0, 0.3, generator=generator)
            tc.b_dec.normal_(0.0, 0.05, generator=generator)
            tc.W_skip.normal_(0.0, 0.1, generator=generator)
        transcoders.append(tc.eval())
    return TranscoderSet(lm.name, transcoders)


def test_a_jumprelu_skip_set_in_gemma_scope_2_layout_round_trips_into_the_same_graph(gemma, tmp_path):
    from interpscope.sae.transcoder_set import load_transcoder_set, save_transcoder_set

    lm, _ = gemma
    tset = _jumprelu_skip_set(lm)
    folder = save_transcoder_set(tset, tmp_path / "set", dtype="float32", layout="gemma_scope_2",
                                 hf_model_id="google/gemma-3-270m")
    first = folder / "transcoder_all" / "layer_0_width_24_l0_small_affine"
    assert (first / "params.safetensors").is_file() and (first / "config.json").is_file()
    loaded = load_transcoder_set(folder, dtype="float64", lm=lm)
    assert type(loaded[0]).__name__ == "JumpReLUTranscoder" and loaded[0].skip
    x = torch.randn(5, lm.adapter.d_model, dtype=torch.float64)
    for mine, back in zip(tset.transcoders, loaded.transcoders, strict=True):
        torch.testing.assert_close(back.encode(x), mine.encode(x), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(back.W_skip, mine.W_skip.float().double(), rtol=0, atol=0)
    built = build_graph(lm, loaded, TEXT, max_feature_nodes=10_000, node_budget=10_000, edge_budget=10**6,
                        lrp=None)
    assert built.n_active_features > 0
    assert built.logit_inputs_sum == pytest.approx(built.logit, rel=1e-6, abs=1e-9)
    original = build_graph(lm, tset, TEXT, max_feature_nodes=10_000, node_budget=10_000, edge_budget=10**6,
                           lrp=None)
    assert built.n_active_features == original.n_active_features
    assert built.replacement_score == pytest.approx(original.replacement_score, rel=1e-5)


@pytest.mark.bundled
def test_the_shipped_gemma3_transcoders_build_a_graph_that_reproduces_the_logit():
    """The 18 shipped JumpReLU skip transcoders of Gemma 3 270M, read from Gemma Scope 2's layout, on the real model:
    the unpruned contributions give the real logit to 1e-3 (relative)."""
    from interpscope.models import load_model
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    lm = load_model("gemma3-270m", device="cpu", dtype="float32")
    folder = default_transcoder_set("gemma3-270m")
    assert folder is not None and (folder / "transcoder_all").is_dir()
    tset = load_transcoder_set(folder, lm=lm)
    assert tset.n_layers == 18 and all(type(tc).__name__ == "JumpReLUTranscoder" and tc.skip for tc in tset.transcoders)
    graph = build_graph(lm, tset, "The capital of France is", max_feature_nodes=16, lrp=None)
    assert graph.n_active_features > 0
    assert abs(graph.logit_inputs_sum - graph.logit) <= 1e-3 * abs(graph.logit)
