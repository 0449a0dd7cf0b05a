"""Feature circuits on a planted case: a downstream feature that is by construction a copy of one upstream feature
must show that edge first, and the spliced pass's readout must add up."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.sae import SAEConfig, build_sae
from interpscope.sae.circuits import feature_circuit
from tests.tiny import loaded, tiny_llama

UP, DOWN = "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"
TEXT = "abcdefgh"


class _Tokenizer:
    def __call__(self, text, return_tensors=None):
        return type("Encoded", (), {"input_ids": torch.tensor([[b % 128 for b in text.encode()]])})()

    def decode(self, ids):
        return "".join(chr(int(i)) for i in ids)


@pytest.fixture(scope="module")
def planted():
    """A tiny Llama whose block 1 writes nothing (so the residual after it is the one after block 0); an upstream
    ReLU SAE whose features are an orthonormal basis of the residual; a downstream SAE whose feature 3 reads exactly
    the direction of upstream feature 5."""
    model = tiny_llama(vocab=128, seed=1).double()
    with torch.no_grad():
        model.model.layers[1].self_attn.o_proj.weight.zero_()
        model.model.layers[1].mlp.down_proj.weight.zero_()
    lm = loaded(model, _Tokenizer(), name="planted")
    d = lm.adapter.d_model
    from interpscope.capture import capture

    x = capture(lm.adapter, lm.encode(TEXT), [UP]).activations[UP][-1].double()
    start = torch.randn(d, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    start[:, 0] = x  # the residual at the last token becomes basis direction 5: upstream feature 5 fires there
    q, _ = torch.linalg.qr(start)
    q[:, 0] *= torch.sign(q[:, 0] @ x)
    basis = q[:, [1, 2, 3, 4, 5, 0, *range(6, d)]]
    upstream = build_sae(SAEConfig(d_in=d, d_sae=d, hook_name=UP, model_name="planted"), dtype=torch.float64)
    downstream = build_sae(SAEConfig(d_in=d, d_sae=8, hook_name=DOWN, model_name="planted"), dtype=torch.float64)
    with torch.no_grad():
        upstream.W_dec.copy_(basis.T)
        upstream.W_enc.copy_(basis)
        upstream.b_enc.zero_()
        upstream.b_dec.zero_()
        downstream.W_enc.zero_()
        downstream.b_enc.fill_(-1e3)  # every other downstream feature stays off
        downstream.W_enc[:, 3] = basis[:, 5]
        downstream.b_enc[3] = 0.0
        downstream.b_dec.zero_()
    return lm, upstream, downstream, basis


@pytest.mark.parametrize("method", ["attnlrp", "cplrp"])
def test_the_planted_copy_edge_comes_first_and_the_readout_adds_up(planted, method):
    lm, upstream, downstream, basis = planted
    circuit = feature_circuit(lm, upstream, downstream, TEXT, feature=3, position=len(TEXT) - 1, method=method)
    assert circuit.value > 0
    first = next(e for e in circuit.edges if e.target == "target" and e.source.startswith("f"))
    assert first.source == "f5"
    assert first.relevance == pytest.approx(circuit.value, rel=1e-6)  # the copy carries all of it
    assert circuit.top_features(1)[0]["feature"] == 5
    c = circuit.conservation
    assert c.upstream_features == pytest.approx(circuit.value, rel=1e-6)
    assert abs(c.error_node) < 1e-6 * abs(circuit.value)
    assert c.target_sae_biases == pytest.approx(0.0, abs=1e-9)  # the planted downstream feature has no bias
    if method == "cplrp":  # CP-LRP sends nothing through the softmaxes: the share does not apply and is absent
        assert c.softmax is None and "softmax" not in circuit.to_dict()["conservation"]
    else:
        assert c.softmax is not None and "softmax" in circuit.to_dict()["conservation"]
    total = (c.input_tokens + (c.model_biases or 0.0) + (c.softmax or 0.0) + c.error_node + c.sae_biases
             + c.target_sae_biases)
    assert total == pytest.approx(circuit.value, rel=1e-6) and c.relative_error < 1e-6


def test_the_target_saes_own_biases_are_counted(planted):
    lm, upstream, downstream, basis = planted
    with torch.no_grad():
        downstream.b_dec.fill_(0.05)  # the target feature now reads (x - b_dec): its biases take a share
        try:
            circuit = feature_circuit(lm, upstream, downstream, TEXT, feature=3, position=len(TEXT) - 1)
        finally:
            downstream.b_dec.zero_()
    c = circuit.conservation
    assert abs(c.target_sae_biases) > 1e-4 and c.relative_error < 1e-6
    assert any(e.target == "f5" and e.source.startswith("t") for e in circuit.edges)  # token -> feature edges


def test_the_logit_target_and_the_errors(planted):
    lm, upstream, downstream, basis = planted
    circuit = feature_circuit(lm, upstream, None, "abcdefgh", method="cplrp")
    c = circuit.conservation
    assert c.softmax is None
    # a logit target has no target SAE: its biases' share does not apply and is absent, not 0
    assert c.target_sae_biases is None and "target_sae_biases" not in circuit.to_dict()["conservation"]
    explained = c.input_tokens + (c.model_biases or 0.0) + c.error_node + c.sae_biases
    assert explained == pytest.approx(circuit.value, rel=1e-6)
    with pytest.raises(InterpscopeError, match="after the upstream"):
        feature_circuit(lm, downstream, upstream, "abcdefgh", feature=1)
    with pytest.raises(InterpscopeError, match="LRP rules"):
        feature_circuit(lm, upstream, downstream, "abcdefgh", feature=3, method="gradxinput")
    with pytest.raises(InterpscopeError, match="0..7"):
        feature_circuit(lm, upstream, downstream, "abcdefgh", feature=3, position=8)


def test_the_first_token_is_a_target_unless_it_is_excluded(planted, monkeypatch):
    """Position 0 is not refused by rule: without a prepended BOS and with no measured sink it is the first word, a
    target like any other; a measured sink there is refused, with that reason."""
    lm, upstream, downstream, basis = planted
    circuit = feature_circuit(lm, upstream, downstream, TEXT, feature=3, position=0, prepend_bos=False)
    assert circuit.conservation.relative_error < 1e-6
    import interpscope.sae.circuits as circuits
    from interpscope.sinks import measure

    def sink_at_zero(rows, prepended=None, point=""):
        report = measure(rows, prepended=prepended, point=point)
        assert 0 not in report.positions  # the planted text has no sink of its own
        return dataclasses.replace(report, measured={**report.measured, 0: 500.0})

    monkeypatch.setattr(circuits, "measure", sink_at_zero)
    with pytest.raises(InterpscopeError, match="Token 0 is a measured attention sink"):
        feature_circuit(lm, upstream, downstream, TEXT, feature=3, position=0, prepend_bos=False)


def _two_stores(tmp_path, monkeypatch):
    """A tiny model with random SAEs at blocks 0 and 1 and their stores (nothing shipped in sight)."""
    from interpscope.models import load_model
    from interpscope.sae.store import build_store, layout
    from tests.sae_store_tiny import random_sae_folder, save_tiny_lm

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(layout.FEATURE_STORES, "shipped", tmp_path / "no-shipped-stores")
    model_dir = save_tiny_lm(tmp_path / "model", seed=2)
    lm = load_model(str(model_dir), device="cpu")
    up = random_sae_folder(lm, tmp_path / "up", hook="blocks.0.hook_resid_post")
    down = random_sae_folder(lm, tmp_path / "down", hook="blocks.1.hook_resid_post", seed=4)
    up_store = build_store(lm, up, n_tokens=512, context_size=64, batch_size=4, eval_tokens=0)
    down_store = build_store(lm, down, n_tokens=512, context_size=64, batch_size=4, eval_tokens=0)
    return lm, down, up_store, down_store


def test_the_circuit_view_in_the_feature_browser(tmp_path, monkeypatch):
    import json

    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import ROOT

    _, _, up_store, down_store = _two_stores(tmp_path, monkeypatch)
    at = AppTest.from_file(str(ROOT / "pages/sae_features.py"), default_timeout=300)
    at.session_state["sae_store"] = down_store.name
    at.session_state["sae_view"] = "Circuit"
    at.session_state["sae-all-models"] = True  # the tiny model's stores, not the sidebar model's
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="sae-circuit-upstream").options == [up_store.name]
    at.radio(key="sae-circuit-target").set_value("The next-token logit").run()
    at.button(key="sae-circuit-run").click().run()
    assert not at.exception, at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert any("Strongest edges into next-token logit" in s["layout"]["title"]["text"] for s in specs)
    readout = next(s for s in specs if s["layout"].get("barmode") == "relative")
    parts = sum(float(t["x"][0]) for t in readout["data"])
    assert parts == pytest.approx(float(readout["layout"]["shapes"][0]["x0"]), rel=1e-6)
    names = [t["name"].split(":")[0] for t in readout["data"]]
    assert "softmax (AttnLRP)" in names
    # CP-LRP sends nothing through the softmaxes: that part is absent, the bar still adds up and draws
    at.radio(key="sae-circuit-method").set_value("cplrp").run()
    at.button(key="sae-circuit-run").click().run()
    assert not at.exception, at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    readout = next(s for s in specs if s["layout"].get("barmode") == "relative")
    assert "softmax (AttnLRP)" not in [t["name"].split(":")[0] for t in readout["data"]]
    parts = sum(float(t["x"][0]) for t in readout["data"])
    assert parts == pytest.approx(float(readout["layout"]["shapes"][0]["x0"]), rel=1e-6)
    button = next(b for b in at.button if b.key and b.key.startswith("sae-circuit-open-"))
    button.click().run()
    assert at.session_state["sae_store"] == up_store.name and at.session_state["sae_view"] == "Feature"


@pytest.mark.parametrize("absent", [(), ("softmax (AttnLRP)",), ("model biases",),
                                    ("softmax (AttnLRP)", "model biases")])
def test_the_circuit_readout_draws_whichever_parts_apply_each_in_its_own_colour(absent):
    """A model without biases (SmolLM2) or CP-LRP (no softmax share) leaves parts out: the bar draws the others,
    each in the colour it has when all are present (this raised on SmolLM2 once bias_sum became absent)."""
    from interpscope.figures.sae import READOUT_COLOURS, circuit_readout_figure

    every = [("input tokens", 1.5), ("SAE error node", 0.25), ("SAE biases", -0.5), ("softmax (AttnLRP)", 2.0),
             ("model biases", 0.125), ("rest", 1e-7)]
    parts = [(name, value) for name, value in every if name not in absent]
    fig = circuit_readout_figure(parts, sum(v for _, v in parts), "value")
    drawn = [(t.name.split(":")[0], t.x[0], t.marker.color) for t in fig.data]
    assert drawn == [(name, value, READOUT_COLOURS[name]) for name, value in parts]


def test_a_feature_that_is_not_active_gets_a_message_naming_those_that_are(tmp_path, monkeypatch):
    import numpy as np
    from streamlit.testing.v1 import AppTest

    from interpscope.sae import load_sae
    from interpscope.sae.store.prompt import prompt_features
    from tests.apptest_util import ROOT

    lm, down, _, down_store = _two_stores(tmp_path, monkeypatch)
    text = "The cat sat on the mat and looked at the dog"
    view = prompt_features(lm, load_sae(down), text)
    last = view.activations[-1]
    silent = int(np.flatnonzero(last <= 0)[0])
    firing = [row["feature"] for row in view.active_at(len(view.tokens) - 1, limit=5)]
    at = AppTest.from_file(str(ROOT / "pages/sae_features.py"), default_timeout=300)
    at.session_state["sae_store"] = down_store.name
    at.session_state["sae_view"] = "Circuit"
    at.session_state["sae-all-models"] = True  # the tiny model's stores, not the sidebar model's
    at.session_state["sae-prompt-text"] = text
    at.session_state["sae-circuit-feature"] = silent
    at.run()
    at.button(key="sae-circuit-run").click().run()
    assert not at.exception, at.exception
    (note,) = [i.value for i in at.info if "not active" in i.value]
    assert f"Feature {silent} is not active at token {len(view.tokens) - 1}" in note
    assert all(f"#{f} " in note for f in firing) and firing
    assert not any("Strongest edges" in str(c.proto.spec) for c in at.get("plotly_chart"))


def test_a_linked_circuit_feature_the_store_lacks_is_named(tmp_path, monkeypatch):
    """circuit_feature=99999999 in a link opened the Circuit view at feature 0 without a word: now the last feature,
    and a note naming what the link asked for."""
    from streamlit.testing.v1 import AppTest

    from interpscope.sae.store import FeatureStore
    from tests.apptest_util import ROOT

    _, _, _, down_store = _two_stores(tmp_path, monkeypatch)
    at = AppTest.from_file(str(ROOT / "pages/sae_features.py"), default_timeout=300)
    at.session_state["sae-all-models"] = True  # the tiny model's stores, not the sidebar model's
    at.query_params.update({"store": down_store.name, "view": "Circuit", "circuit_feature": "99999999"})
    at.run()
    assert not at.exception, at.exception
    last = FeatureStore(down_store).d_sae - 1
    assert at.number_input(key="sae-circuit-feature").value == last
    assert any(f"feature 99999999, which is not here (features 0–{last}): showing {last}" in w.value
               for w in at.warning)
