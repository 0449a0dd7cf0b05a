"""Attribution graphs over a cross-layer transcoder (CLT: layer l's features write to block l's MLP output and every
later one), on tiny float64 models: a CLT that writes only to its own block gives the per-layer set's graph exactly,
a real CLT's contributions add up to the logit and to every feature's pre-activation, CP-LRP equals the direct
effects, and the real model with the replacement imposed (live features of every layer writing to every later block)
IS the graph's linear prediction."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import model_lock
from interpscope.graphs import build_graph
from interpscope.graphs.engine import compute_rows, feature_reads, replacement
from interpscope.graphs.interventions import GraphRun
from interpscope.graphs.replay import record
from interpscope.sae.clt import CrossLayerTranscoder
from interpscope.sae.transcoder_set import TranscoderSet
from tests.graphs.test_graph_interventions import hand_graph
from tests.graphs.test_graphs import TEXT, _lm, _sparse_set
from tests.tiny import relevance_model, tiny_llama


def _clt_from_set(tset: TranscoderSet, cross: float = 0.0, seed: int = 0) -> CrossLayerTranscoder:
    """A ReLU CLT whose encoders and own-block decoders are the set's; `cross` > 0 adds random decoders to the later
    blocks (0: it writes to its own block only, the set itself)."""
    first = tset[0]
    n, d, k = tset.n_layers, first.cfg.d_in, first.cfg.d_sae
    clt = CrossLayerTranscoder(n, d, k, jumprelu=False, model_name=tset.model_name, dtype=first.W_enc.dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer, tc in enumerate(tset.transcoders):
            clt.W_enc[layer].copy_(tc.W_enc)
            clt.b_enc[layer].copy_(tc.b_enc)
            clt.b_dec[layer].copy_(tc.b_dec)
            clt.W_dec[layer][:, 0].copy_(tc.W_dec)
            if cross:
                later = clt.W_dec[layer][:, 1:]
                later.copy_(cross * torch.randn(later.shape, generator=generator, dtype=later.dtype))
    return clt


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request):
    lm = _lm(tiny_llama(vocab=128, seed=3) if request.param == "llama" else relevance_model("gemma3", seed=2),
             name=f"tiny-{request.param}")
    tset = _sparse_set(lm)
    with torch.no_grad():  # off the quantile's exact ties, where two encoders' last bits would disagree on ReLU(0)
        for tc in tset.transcoders:
            tc.b_enc.sub_(1e-9)
    return lm, tset


def test_a_clt_that_writes_only_to_its_own_block_is_the_per_layer_set(model):
    lm, tset = model
    kwargs = dict(max_feature_nodes=10_000, node_budget=10_000, edge_budget=10**6, lrp=None)
    per_layer = build_graph(lm, tset, TEXT, **kwargs)
    clt = build_graph(lm, _clt_from_set(tset), TEXT, **kwargs)
    assert clt.n_active_features == per_layer.n_active_features > 0
    assert clt.logit_inputs_sum == pytest.approx(per_layer.logit_inputs_sum, rel=1e-9)
    mine = {(e["source"], e["target"]): e["weight"] for e in per_layer.edges}
    theirs = {(e["source"], e["target"]): e["weight"] for e in clt.edges}
    assert mine.keys() == theirs.keys()
    assert np.allclose([theirs[k] for k in mine], list(mine.values()), rtol=1e-9, atol=1e-12)


def test_a_clts_graph_adds_up_to_the_logit_and_the_preactivations(model):
    lm, tset = model
    clt = _clt_from_set(tset, cross=0.3)
    graph = build_graph(lm, clt, TEXT, max_feature_nodes=10_000, node_budget=10_000, edge_budget=10**6, lrp=None)
    assert graph.logit_inputs_sum == pytest.approx(graph.logit, rel=1e-5, abs=1e-8)
    assert "cross-layer" in graph.transcoders
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    rep = replacement(run, clt, [])
    # a block's error node is what neither its own features nor the earlier layers' cross-layer writes give
    acts = [clt.encode_layer(run.mlp_in[layer], layer).detach() for layer in range(run.n_layers)]
    last = run.n_layers - 1
    written = sum(acts[s] @ clt.W_dec[s][:, last - s].detach() for s in range(run.n_layers))
    torch.testing.assert_close(rep.errors[last], run.mlp_out[last] - written, rtol=1e-9, atol=1e-12)
    columns = list(range(rep.features.starts[1], rep.n_features, 3))[:8]
    assert columns
    rows = compute_rows(rep, feature_reads(rep, columns))
    for row, column in zip(rows.weights, columns, strict=True):
        layer, feature = int(rep.features.layer[column]), int(rep.features.feature[column])
        assert row.sum() + float(rep.b_enc(layer)[feature]) == pytest.approx(rep.pre_activation(column), rel=1e-5)
        # layer 0's features reach layer 1's through their cross-layer write too: not only through attention
    first_layer = slice(rep.features.starts[0], rep.features.starts[1])
    assert np.abs(rows.weights[:, first_layer]).sum() > 0


def test_cplrp_over_a_clt_equals_the_direct_effects(model):
    lm, tset = model
    cp = build_graph(lm, _clt_from_set(tset, cross=0.3), TEXT, max_feature_nodes=20, lrp="cplrp")
    logit = next(n["id"] for n in cp.nodes if n["kind"] == "logit")
    lrp = {e["source"]: e["weight"] for e in cp.lrp_edges if e["target"] == logit}
    for node in cp.nodes:
        if node["kind"] != "logit":
            assert lrp.get(node["id"], 0.0) == pytest.approx(node["logit_effect"], rel=1e-5, abs=1e-8)


def test_the_local_replacement_readout_over_a_clt_is_the_graphs_prediction():
    """Every feature active (no ReLU crosses zero): the real model with patterns and norm scales frozen and each
    block's MLP output replaced by what the CLT's live features of that block and every earlier one write there +
    the constant error IS the graph's linear model."""
    lm = _lm(tiny_llama(vocab=128, seed=5), name="tiny-llama")
    tset = _sparse_set(lm, width=24, density=1.0)
    for tc in tset.transcoders:
        with torch.no_grad():
            tc.b_enc.fill_(50.0)
    clt = _clt_from_set(tset, cross=0.2)
    graph = hand_graph(lm, tset, text=TEXT, per_layer=4)
    prepared = GraphRun(lm, clt, graph)
    nodes = [n for n in graph.nodes if n["kind"] == "feature" and n["layer"] == 0][:3]
    sets = [[n] for n in nodes] + [nodes[:2]]
    # a small step (0.1% of each activation): a whole ablation at the last position moves that position's
    # residual stream so far (its rms is tiny) that later features cross zero, where the live readout leaves the
    # linear model
    factor = 0.999
    predicted = prepared.predicted_linear(sets, factor)
    replaced, _ = prepared.actual(sets, factor, freeze=("final_norm", "norms", "attention", "mlps"))
    assert min(abs(v) for v in replaced) > 1e-6
    assert replaced == pytest.approx(predicted, rel=1e-6, abs=1e-12)
    per_layer = GraphRun(lm, tset, graph).predicted_linear(sets, factor)
    assert max(abs(a - b) for a, b in zip(per_layer, predicted, strict=True)) > 1e-6  # the cross writes count


def test_the_cli_traces_a_clt_folder_with_a_contrast_as_the_api_does(folders, tmp_path):
    """--transcoders CLT_FOLDER (circuit-tracer's CLT layout) and --contrast: the CLI's document is the API's."""
    import json

    from interpscope.results import without_timings
    from interpscope.sae.clt import save_clt
    from interpscope.sae.transcoder_set import load_dictionary, load_transcoder_set
    from tests.graphs.test_graphs import _assert_same, _run_cli

    lm, model_dir, set_dir = folders
    clt = _clt_from_set(load_transcoder_set(set_dir, lm=lm), cross=0.2)
    folder = save_clt(clt, tmp_path / "clt")
    loaded = load_dictionary(folder, lm=lm)
    assert isinstance(loaded, CrossLayerTranscoder)
    text = "The cat sat on the"
    result = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(folder), "--text", text,
                      "--contrast", " dog", "--node-budget", "15", "--edge-budget", "40", "--max-feature-nodes", "20",
                      "--dtype", "float64", "--lrp", "none", "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["target"]["contrast"]["token"] == " dog"
    api = build_graph(lm, loaded, text, contrast=" dog", node_budget=15, edge_budget=40, max_feature_nodes=20,
                      lrp=None).to_dict()
    _assert_same(without_timings(document), without_timings(json.loads(json.dumps(api))))
    assert document["logit_inputs_sum"] == pytest.approx(document["logit"], rel=1e-4)


@pytest.mark.bundled
def test_the_shipped_smollm2_clt_builds_a_graph_that_reproduces_the_logit(bundled_lm):
    from interpscope.config import ASSETS_DIR
    from interpscope.sae.transcoder_set import load_dictionary

    clt = load_dictionary(ASSETS_DIR / "clt" / "smollm2-135m", lm=bundled_lm)
    assert isinstance(clt, CrossLayerTranscoder) and clt.n_layers == 30
    graph = build_graph(bundled_lm, clt, "The capital of France is", max_feature_nodes=16, lrp=None)
    assert graph.n_active_features > 0
    assert abs(graph.logit_inputs_sum - graph.logit) <= 1e-3 * abs(graph.logit)
