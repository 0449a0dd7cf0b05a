"""Attribution graphs: the frozen replay's batched backward equals autograd, the contributions add up to the logit
and to every feature's pre-activation, a planted copy circuit is the top path, pruning keeps its budgets, CP-LRP
edges equal the direct ones, and the command line gives the API's document or a one-line refusal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.graphs import build_graph
from interpscope.graphs.engine import compute_rows, feature_reads, logit_reads, replacement
from interpscope.graphs.replay import Reads, linear_backward, record, replay_forward
from interpscope.results import without_timings
from interpscope.sae.transcoder_set import TranscoderSet, new_transcoder, random_transcoder_set
from tests.tiny import loaded, relevance_model, tiny_llama

ROOT = Path(__file__).resolve().parents[2]
TEXT = "graphs of tiny models"


class _Bytes:
    """One token per byte (ids below `vocab`)."""

    def __init__(self, vocab: int = 128):
        self.vocab = vocab

    def __call__(self, text, return_tensors=None):
        return type("Encoded", (), {"input_ids": torch.tensor([[b % self.vocab for b in text.encode()]])})()

    def encode(self, text, add_special_tokens=False):
        return [b % self.vocab for b in text.encode()]

    def decode(self, ids):
        return "".join(chr(int(i)) for i in ids)


def _lm(model, name: str = "tiny-llama"):
    model.set_attn_implementation("eager")
    return loaded(model.double().eval(), _Bytes(model.config.vocab_size), name=name)


def _sparse_set(lm, width: int = 48, seed: int = 0, density: float = 0.2) -> TranscoderSet:
    """Random transcoders whose features each fire on about `density` of TEXT's positions."""
    tset = random_transcoder_set(lm, width, seed)
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    with torch.no_grad():
        for layer, tc in enumerate(tset.transcoders):
            tc.double()
            pre = run.mlp_in[layer] @ tc.W_enc
            tc.b_enc.copy_(-torch.quantile(pre, 1 - density, dim=0))
    return tset


@pytest.fixture(scope="module")
def tiny():
    lm = _lm(tiny_llama(vocab=128, seed=3))
    return lm, _sparse_set(lm)


def test_batched_backward_equals_autograd(tiny):
    """Mixed reads (the logit, features of both blocks at several positions) in one batch against autograd through
    the frozen replay run forwards."""
    lm, tset = tiny
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    rep = replacement(run, tset.transcoders, [])
    columns = [int(c) for c in np.flatnonzero(rep.features.position.numpy() > 2)[::7][:6]]
    reads = logit_reads(rep, [5])
    more = feature_reads(rep, columns)
    batch = Reads(reads.layers + more.layers, reads.positions + more.positions,
                  torch.cat([reads.directions, more.directions]))
    got: dict = {}
    linear_backward(run, batch, lambda layer, G: got.__setitem__(layer, G.clone()),
                    lambda G: got.__setitem__("embed", G.clone()))
    for b in range(batch.size):
        embeds = run.resid_pre[0].clone().requires_grad_(True)
        outs = [o.clone().requires_grad_(True) for o in run.mlp_out]
        points = replay_forward(run, embeds, outs)  # [pre0, mid0, pre1, mid1, ..., final]
        layer, position = batch.layers[b], batch.positions[b]
        read_at = points[-1] if layer == run.n_layers else points[2 * layer + 1]
        value = read_at[position] @ batch.directions[b]
        grads = torch.autograd.grad(value, [embeds, *outs], allow_unused=True)
        P = got["embed"].shape[1]
        torch.testing.assert_close(got["embed"][b], grads[0][:P], rtol=1e-9, atol=1e-12)
        assert float(grads[0][P:].abs().sum()) == 0.0  # nothing after the last read position moves a read
        for L in range(run.n_layers):
            want = torch.zeros_like(outs[L]) if grads[1 + L] is None else grads[1 + L]
            mine = got.get(L, torch.zeros(batch.size, P, run.W_E.shape[1], dtype=run.dtype))[b]
            if L >= layer:  # blocks at or above a read do not reach it (the pass starts lower for a lone read)
                assert float(want.abs().sum()) == 0.0
            else:
                torch.testing.assert_close(mine, want[:P], rtol=1e-9, atol=1e-12)


def test_replay_reproduces_the_real_logits(tiny):
    lm, _ = tiny
    with model_lock(lm):
        ids = lm.encode(TEXT)
        run = record(lm, ids)
        real = lm.model(input_ids=ids).logits[0, -1]
    points = replay_forward(run, run.resid_pre[0], run.mlp_out)
    from interpscope.graphs.replay import final_logits

    torch.testing.assert_close(final_logits(run, points[-1]), real.detach(), rtol=1e-6, atol=1e-6)


def test_logit_and_preactivations_add_up(tiny):
    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, max_feature_nodes=40, lrp=None)
    assert graph.bias_sum is None  # Llama: no biases on the way
    assert graph.logit_inputs_sum == pytest.approx(graph.logit, rel=1e-4)
    assert graph.n_expanded_features == 40
    with model_lock(lm):
        run = record(lm, lm.encode(TEXT))
    rep = replacement(run, tset.transcoders, [])
    columns = list(range(0, rep.n_features, max(1, rep.n_features // 12)))
    rows = compute_rows(rep, feature_reads(rep, columns))
    for row, column in zip(rows.weights, columns, strict=True):
        layer, feature = int(rep.features.layer[column]), int(rep.features.feature[column])
        assert row.sum() + float(rep.b_enc(layer)[feature]) == pytest.approx(rep.pre_activation(column), rel=1e-6)
        assert float(rep.features.activation[column]) == pytest.approx(rep.pre_activation(column), rel=1e-6)
        first_block_cols = rep.features.starts[layer]  # nothing from its own block or above
        assert not row[first_block_cols:rep.features.starts[-1]].any()


def test_biases_are_counted_qwen2():
    """Qwen2 has value biases: logit = contributions + bias_sum, each feature's row + bias + b_enc = its
    pre-activation."""
    lm = _lm(relevance_model("qwen2", seed=2), name="tiny-qwen2")
    graph = build_graph(lm, _sparse_set(lm), TEXT, max_feature_nodes=10, lrp=None)
    assert graph.bias_sum is not None and graph.bias_sum != 0
    assert graph.logit_inputs_sum + graph.bias_sum == pytest.approx(graph.logit, rel=1e-6)


def test_pruning_keeps_budgets_and_ranks_no_sink(tiny):
    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, node_budget=12, edge_budget=30, max_feature_nodes=30, lrp=None)
    ranked = [n for n in graph.nodes if n["kind"] in ("feature", "error")]
    assert 0 < len(ranked) <= 12 and 0 < len(graph.edges) <= 30
    assert sum(n["kind"] == "embedding" for n in graph.nodes) == len(graph.tokens)
    assert sum(n["kind"] == "logit" for n in graph.nodes) == 1
    ids = {n["id"] for n in graph.nodes}
    assert all(e["source"] in ids and e["target"] in ids for e in graph.edges)
    sinks = {row["position"] for row in graph.sinks}
    assert not any(n["position"] in sinks for n in ranked)
    influences = sorted((n["influence"] for n in ranked), reverse=True)
    assert influences == [n["influence"] for n in sorted(ranked, key=lambda n: -n["influence"])]
    assert 0 <= graph.replacement_score <= 1 and 0 <= graph.completeness_score <= 1
    rows = graph.table_rows()
    assert len(rows) == len(graph.nodes) and rows[0]["id"] == graph.nodes[0]["id"]


class _TranscoderMLP(nn.Module):
    """An MLP that IS a ReLU transcoder: relu(x W_enc + b_enc) W_dec (named like a Llama MLP for the adapter)."""

    def __init__(self, W_enc: torch.Tensor, b_enc: torch.Tensor, W_dec: torch.Tensor):
        super().__init__()
        d, width = W_enc.shape
        self.gate_proj = nn.Linear(d, width, dtype=torch.float64)
        self.up_proj = nn.Linear(d, width, bias=False, dtype=torch.float64)
        self.down_proj = nn.Linear(width, d, bias=False, dtype=torch.float64)
        self.act_fn = nn.ReLU()
        with torch.no_grad():
            self.gate_proj.weight.copy_(W_enc.T)
            self.gate_proj.bias.copy_(b_enc)
            self.down_proj.weight.copy_(W_dec.T)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)))


def test_planted_copy_circuit_is_the_top_path():
    """Block 1's MLP is an exact transcoder whose feature 0 reads token A's embedding direction and writes A's
    unembedding direction; block 0's MLP is an exact random transcoder. Error nodes vanish and the graph's top path
    to logit(A) is embedding(A) -> feature 0 of block 1 -> logit."""
    model = tiny_llama(vocab=128, seed=5, initializer_range=0.05)
    model.set_attn_implementation("eager")
    model = model.double()
    A = ord("q")
    E, W_U = model.model.embed_tokens.weight.detach(), model.lm_head.weight.detach().T
    d, width = E.shape[1], 24
    generator = torch.Generator().manual_seed(0)
    transcoders = []
    for layer in range(2):
        W_enc = torch.randn(d, width, generator=generator, dtype=torch.float64) * 0.3
        b_enc = torch.full((width,), -0.5, dtype=torch.float64)
        W_dec = torch.randn(width, d, generator=generator, dtype=torch.float64) * 0.01
        if layer == 1:
            W_enc[:, 0] = 4.0 * E[A] / E[A].norm()
            b_enc[0] = -0.5
            W_dec[0] = 3.0 * W_U[:, A] / W_U[:, A].norm()
        model.model.layers[layer].mlp = _TranscoderMLP(W_enc, b_enc, W_dec)
        tc = new_transcoder(loaded(model, _Bytes()), layer, width, dtype=torch.float64)
        with torch.no_grad():
            tc.W_enc.copy_(W_enc)
            tc.b_enc.copy_(b_enc)
            tc.W_dec.copy_(W_dec)
            tc.b_dec.zero_()
        transcoders.append(tc)
    lm = loaded(model.eval(), _Bytes(), name="planted")
    graph = build_graph(lm, transcoders, "xyzq", target="q", node_budget=20, edge_budget=60, max_feature_nodes=30,
                        lrp=None)
    assert graph.logit_inputs_sum == pytest.approx(graph.logit, rel=1e-6)
    errors = [n for n in graph.nodes if n["kind"] == "error"]
    assert all(n["activation"] < 1e-9 for n in errors)  # error-free transcoders
    logit = next(n for n in graph.nodes if n["kind"] == "logit")
    into_logit = sorted((e for e in graph.edges if e["target"] == logit["id"]), key=lambda e: -abs(e["weight"]))
    assert into_logit[0]["source"] == "F1_0_3"
    into_feature = sorted((e for e in graph.edges if e["target"] == "F1_0_3"), key=lambda e: -abs(e["weight"]))
    assert into_feature[0]["source"] == "E_3" and into_feature[0]["weight"] > 0
    top = max((n for n in graph.nodes if n["kind"] == "feature"), key=lambda n: n["influence"])
    assert top["id"] == "F1_0_3"


def test_cplrp_edges_equal_direct_edges(tiny):
    """CP-LRP freezes the pattern and the norm scales: in the linear replacement model its relevance for the logit
    is each node's direct effect. AttnLRP also moves relevance through the softmax, so it differs."""
    lm, tset = tiny
    cp = build_graph(lm, tset, TEXT, max_feature_nodes=20, lrp="cplrp", lrp_features=2)
    logit = next(n["id"] for n in cp.nodes if n["kind"] == "logit")
    direct = {n["id"]: n["logit_effect"] for n in cp.nodes if n["kind"] != "logit"}
    lrp = {e["source"]: e["weight"] for e in cp.lrp_edges if e["target"] == logit}
    assert cp.lrp_method and lrp
    for node, value in direct.items():
        assert lrp.get(node, 0.0) == pytest.approx(value, rel=1e-6, abs=1e-9)
    into_features = {(e["source"], e["target"]): e["weight"] for e in cp.lrp_edges if e["target"] != logit}
    assert len({target for _, target in into_features}) == 2
    shared = [(e, into_features[(e["source"], e["target"])]) for e in cp.edges
              if (e["source"], e["target"]) in into_features]
    assert shared  # the pruned direct edges into those features, where kept, carry the same weights
    for edge, value in shared:
        assert value == pytest.approx(edge["weight"], rel=1e-6, abs=1e-9)
    assert cp.agreement["spearman"] == pytest.approx(1.0)
    attn = build_graph(lm, tset, TEXT, max_feature_nodes=20, lrp="attnlrp")
    assert attn.agreement["spearman"] < 1.0 and attn.agreement["moved"]


# --- the command line ---------------------------------------------------------------------------------------------
def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "interpscope.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_cli_document_equals_api(folders):
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm, model_dir, set_dir = folders
    text = "The cat sat on the"
    result = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", text,
                      "--node-budget", "15", "--edge-budget", "40", "--max-feature-nodes", "20", "--dtype", "float64",
                      "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    api = build_graph(lm, load_transcoder_set(set_dir, lm=lm), text, node_budget=15, edge_budget=40,
                      max_feature_nodes=20).to_dict()
    assert document["schema"] == "interpscope.graph"
    _assert_same(without_timings(document), without_timings(json.loads(json.dumps(api))))


def test_cli_ablation_check_document_equals_api(folders, tmp_path):
    """--ablation-check N --check-json OUT writes the page's / the API's ablation-check document (same rows and r's),
    the graph's own --json unchanged beside it; --check-supernodes ranks the decoder grouping's supernodes."""
    from interpscope.graphs.grouping import group_by_decoder
    from interpscope.graphs.interventions import ablation_check
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm, model_dir, set_dir = folders
    text = "The cat sat on the"
    common = ("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", text, "--node-budget",
              "15", "--edge-budget", "40", "--max-feature-nodes", "20", "--dtype", "float64")
    result = _run_cli(*common, "--json", str(tmp_path / "g.json"), "--ablation-check", "3",
                      "--check-json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # stdout holds the check's document alone
    tset = load_transcoder_set(set_dir, lm=lm)
    graph = build_graph(lm, tset, text, node_budget=15, edge_budget=40, max_feature_nodes=20)
    api = ablation_check(lm, tset, graph, n=3).to_dict()
    assert document["schema"] == "interpscope.graph.ablation_check" and len(document["rows"]) == 6
    _assert_same(without_timings(document), without_timings(json.loads(json.dumps(api))))
    assert json.loads((tmp_path / "g.json").read_text())["schema"] == "interpscope.graph"
    grouped = _run_cli(*common, "--ablation-check", "2", "--check-supernodes", "0.2")
    assert grouped.returncode == 0, grouped.stderr
    groups = group_by_decoder(graph.nodes, tset, 0.2, singletons=True)
    summary = ablation_check(lm, tset, graph, n=2, groups=groups).summary()
    assert summary in grouped.stdout and "Attribution graph of" in grouped.stdout


@pytest.mark.parametrize("extra, message", [
    (("--check-json", "-"), "need(s) --ablation-check N"),
    (("--check-readouts",), "need(s) --ablation-check N"),
    (("--ablation-check", "2", "--check-supernodes", "1.5"), "cosine in (0, 1]"),
    (("--ablation-check", "2", "--json", "-", "--check-json", "-"), "two documents to stdout"),
])
def test_cli_ablation_check_refusals_exit_2(folders, capsys, extra, message):
    from interpscope.cli import main

    _, model_dir, set_dir = folders
    assert main(["graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", "The cat",
                 *extra]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def _assert_same(a, b, where: str = "") -> None:
    """Equal documents, floats to 1e-9 relative (the command runs one thread, this process two)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def test_cli_empty_text_exits_2_before_loading(folders):
    _, model_dir, set_dir = folders
    result = _run_cli("graph", "--model", str(model_dir), "--transcoders", str(set_dir), "--text", "  ")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "empty" in lines[0], result.stderr


@pytest.mark.parametrize("extra, message", [
    (("--text", "word " * 140), "limit here is 128 tokens"),
    (("--text", "The cat", "--target", "not one token at all"), "pick a single token"),
    (("--text", "The cat", "--no-transcoders"), "No transcoders for"),
    (("--text", "The cat", "--node-budget", "0"), "--node-budget"),
])
def test_cli_bad_inputs_exit_2(folders, capsys, extra, message):
    """In this process (main(argv), the command line's own entry): one line on stderr, status 2."""
    from interpscope.cli import main

    _, model_dir, set_dir = folders
    args = ["graph", "--model", str(model_dir), "--dtype", "float64", *extra]
    if "--no-transcoders" in args:
        args.remove("--no-transcoders")
    else:
        args += ["--transcoders", str(set_dir)]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_refuses_other_families():
    lm = _lm(relevance_model("gpt2", seed=0), name="tiny-gpt2")
    with pytest.raises(InterpscopeError, match="Llama-style"):
        build_graph(lm, [None, None], TEXT)


def test_smollm2_logit_reproduced(bundled_lm):
    """The bundled model, 16 tokens, random sparse transcoders: the unpruned contributions give the real logit to
    1e-3 relative."""
    tset = random_transcoder_set(bundled_lm, 64, seed=0)
    with torch.no_grad():
        for tc in tset.transcoders:
            tc.b_enc.sub_(1.0)  # few features fire: a small graph
    text = "The capital of France is Paris, and the capital of Italy is"
    graph = build_graph(bundled_lm, tset, text, max_feature_nodes=16, lrp=None)
    assert 10 <= len(graph.tokens) <= 20
    assert abs(graph.logit_inputs_sum - graph.logit) <= 1e-3 * abs(graph.logit)
    assert graph.sinks and all(n.get("sink") for n in graph.nodes if n["position"] == graph.sinks[0]["position"])


def test_neuronpedia_export_and_namespace(tiny):
    import interpscope

    assert interpscope.graphs.build_graph is build_graph
    lm, tset = tiny
    graph = build_graph(lm, tset, TEXT, node_budget=10, edge_budget=25, max_feature_nodes=15, lrp=None)
    document = graph.to_neuronpedia("tiny")
    assert document["metadata"]["prompt_tokens"] == graph.tokens and document["metadata"]["slug"] == "tiny"
    ids = {n["node_id"] for n in document["nodes"]}
    assert len(ids) == len(graph.nodes) and len(document["links"]) == len(graph.edges)
    assert all(link["source"] in ids and link["target"] in ids for link in document["links"])
    kinds = {n["feature_type"] for n in document["nodes"]}
    assert {"embedding", "logit"} <= kinds <= {"embedding", "logit", "cross layer transcoder",
                                               "mlp reconstruction error"}
    first = graph.tokens and document["nodes"][[n["kind"] for n in graph.nodes].index("embedding")]
    assert first["node_id"].startswith("E_") and first["layer"] == "E"
    shares = [n["influence"] for n in document["nodes"] if n["feature_type"] != "logit"]
    assert max(shares) == pytest.approx(1.0) and min(shares) > 0
    json.dumps(document)


def test_exports_name_the_set_without_the_servers_absolute_path(folders, monkeypatch, tmp_path):
    """The graph's JSON ('transcoders') and its Neuronpedia export ('metadata.scan') carried the set folder's
    absolute path; in server mode they name it as the pages do ('[data dir]/...')."""
    import shutil

    from interpscope.graphs.neuronpedia import to_neuronpedia
    from interpscope.sae.transcoder_set import load_transcoder_set

    lm, _, set_dir = folders
    data = tmp_path / "data"
    shutil.copytree(set_dir, data / "sets" / "mine")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data))
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    graph = build_graph(lm, load_transcoder_set(data / "sets" / "mine", lm=lm), "The cat sat on the", node_budget=8,
                        edge_budget=20, max_feature_nodes=10, lrp=None)
    documents = json.dumps(graph.to_dict()) + json.dumps(to_neuronpedia(graph))
    assert graph.transcoders == "[data dir]/sets/mine" and str(tmp_path) not in documents
    assert to_neuronpedia(graph)["metadata"]["scan"] == "[data dir]/sets/mine"


@pytest.mark.bundled
def test_the_graphs_token_cap_is_named_as_its_own(bundled_lm):
    """The graph's 128-token refusal blamed INTERPSCOPE_MAX_TOKENS, a setting that was not the one in force."""
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    tset = load_transcoder_set(default_transcoder_set(bundled_lm.name), lm=bundled_lm)
    with pytest.raises(InterpscopeError) as refused:
        build_graph(bundled_lm, tset, "word " * 200, lrp=None)
    assert "this view's own limit" in str(refused.value) and "INTERPSCOPE_MAX_TOKENS" not in str(refused.value)


def test_the_agreement_sentence_compares_unrounded_and_shows_it():
    """'Spearman ρ = 0.70: they partly agree' read as a contradiction ('mostly' starts at 0.7): the sentence now
    shows the digits that decided it."""
    from interpscope.graphs.result import AttributionGraph

    def said(rho):
        graph = AttributionGraph(model="m", transcoders="t", text="x", tokens=["x"], target={}, logit=1.0,
                                 logit_inputs_sum=1.0, agreement={"spearman": rho, "n_nodes": 9})
        return graph.agreement_sentence(9)

    assert said(0.6996).endswith("ρ = 0.6996 (below 0.7): they partly agree.")
    assert said(0.7004).endswith("ρ = 0.7004 (above 0.7): they mostly agree.")
    assert said(0.7).endswith("ρ = 0.70: they mostly agree.") and said(0.85).endswith("ρ = 0.85: they mostly agree.")
    assert said(0.2996).endswith("(below 0.3): they disagree.") and said(0.5).endswith("0.50: they partly agree.")


def test_an_uncapped_budget_expands_every_reached_feature_in_rounds(tiny, monkeypatch):
    """With room for every feature, the graph expands exactly the features some path from the logit reaches, in a
    few rounds (one per depth), not one ranking per BATCH; the same rows as the batched order."""
    import interpscope.graphs.build as build

    lm, tset = tiny
    rounds: list[int] = []
    original = build.influence

    def counted(*args, **kwargs):
        rounds.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "influence", counted)
    kwargs = dict(node_budget=10_000, edge_budget=10**6, lrp=None)
    full = build_graph(lm, tset, TEXT, max_feature_nodes=10**6, **kwargs)
    uncapped_rounds = len(rounds)
    assert uncapped_rounds <= lm.adapter.n_layers + 2
    rounds.clear()
    monkeypatch.setattr(build, "BATCH", 4)
    batched = build_graph(lm, tset, TEXT, max_feature_nodes=full.n_expanded_features, **kwargs)
    assert len(rounds) > uncapped_rounds  # the capped path re-ranks every BATCH
    assert batched.n_expanded_features == full.n_expanded_features
    assert batched.replacement_score == pytest.approx(full.replacement_score, rel=1e-9)
    assert {n["id"] for n in batched.nodes} == {n["id"] for n in full.nodes}
