"""One text, every view: the same tokens run and the same prediction. `interpscope predict` said P(' Paris') = 0.7725
(no BOS) where `interpscope flow` ended its logit lens at 0.7491 (BOS prepended) for the same text, and neither said
why; every view now turns (text, BOS choice, model) into token ids through interpscope.inputs.input_ids_for."""
from __future__ import annotations

import json

import pytest

import interpscope
from interpscope.cli import main

pytestmark = pytest.mark.bundled
TEXT = "The capital of France is"


def cli_document(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_every_view_runs_the_same_tokens_and_agrees_on_the_prediction(bundled_lm, capsys):
    from interpscope.entropy_neurons.cards import text_activations
    from interpscope.graphs import build_graph
    from interpscope.sae.transcoder_set import default_transcoder_set, load_transcoder_set

    lm = bundled_lm
    prediction = interpscope.predict(lm, TEXT)
    tokens, top = prediction.tokens, prediction.predictions[0]
    assert prediction.bos_prepended and prediction.token_ids[0] == lm.prefix_token_id and top.token == " Paris"

    explained = interpscope.explain(lm, TEXT, "gradxinput")
    assert explained.tokens == tokens and explained.bos_prepended
    assert explained.top[0].id == top.id and explained.top[0].prob == pytest.approx(top.prob, abs=1e-5)
    flow = interpscope.flow(lm, TEXT)
    assert flow.tokens == tokens and flow.target.token_id == top.id
    assert float(flow.lens_probability[-1]) == pytest.approx(top.prob, abs=1e-5)  # the lens's last step: the model
    assert interpscope.head_patterns(lm, TEXT).tokens == tokens
    assert interpscope.patch(lm, TEXT, "The capital of Italy is", components="resid").clean_tokens == tokens
    assert text_activations(lm, TEXT, ["29.11"]).tokens == tokens
    graph = build_graph(lm, load_transcoder_set(default_transcoder_set(lm.name), lm=lm), TEXT, node_budget=8,
                        edge_budget=20, max_feature_nodes=8, lrp=None)
    assert graph.tokens == tokens and graph.target["id"] == top.id
    assert graph.target["probability"] == pytest.approx(top.prob, abs=1e-5)

    # the command line: predict and flow on the same text give the same tokens and probability as the API
    said = cli_document(capsys, "predict", "--text", TEXT, "--json")
    assert said["tokens"] == tokens and said["bos_prepended"] is True
    assert said["predictions"][0]["prob"] == pytest.approx(top.prob, abs=1e-5)
    flowed = cli_document(capsys, "flow", "--text", TEXT, "--json", "-")
    assert flowed["tokens"] == tokens and flowed["steps"][-1]["probability"] == pytest.approx(top.prob, abs=1e-5)


def test_switching_the_prefix_off_is_one_choice_every_view_honours(bundled_lm):
    lm = bundled_lm
    bare = interpscope.predict(lm, TEXT, prepend_bos=False)
    assert not bare.bos_prepended and bare.tokens == ["The", " capital", " of", " France", " is"]
    flow = interpscope.flow(lm, TEXT, prepend_bos=False)
    assert flow.tokens == bare.tokens and not flow.bos_prepended
    assert float(flow.lens_probability[-1]) == pytest.approx(bare.predictions[0].prob, abs=1e-5)
