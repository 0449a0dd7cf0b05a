"""Information flow: the logit lens against a hand computation, contributions that add up, the relevance graph."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.flow.information import attention_pattern, information_flow
from tests.tiny import loaded, tiny_gemma3, tiny_gpt2, tiny_llama, tiny_neox

PROMPT = "The quick brown fox jumps over"


class _Tokenizer:
    """A byte-level stand-in tokenizer (ids = bytes) for tiny models with a small vocabulary."""

    def __call__(self, text, return_tensors=None):
        ids = torch.tensor([[b % 128 for b in text.encode()]])
        return type("Encoded", (), {"input_ids": ids})()

    def decode(self, ids):
        return "".join(chr(int(i)) for i in ids)


def tiny(factory):
    model = factory(vocab=128).double().eval()
    return loaded(model, _Tokenizer(), name=factory.__name__)


FACTORIES = [tiny_llama, tiny_gpt2, tiny_neox, tiny_gemma3]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_lens_at_the_last_block_is_the_models_prediction_and_contributions_add_up(factory):
    lm = tiny(factory)
    flow = information_flow(lm, PROMPT)
    ids = lm.encode(PROMPT)
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0, -1].double()
    probs = torch.softmax(logits, -1)
    target = flow.target
    # the lens normalises in float64 by hand; HF's RMSNorms and OLMo/Gemma norms round through float32
    assert flow.lens_probability[-1] == pytest.approx(float(probs[target.token_id]), rel=1e-6)
    assert flow.lens_rank[-1] == int((logits > logits[target.token_id]).sum()) + 1 == 1  # the predicted token
    assert flow.lens_value[-1] == pytest.approx(float(logits[target.token_id]), rel=1e-6)
    total = flow.embed_contribution + flow.attn_contribution.sum() + flow.mlp_contribution.sum() + \
        flow.constant_contribution
    assert total == pytest.approx(flow.value, rel=1e-6)  # float64 sums vs the model's float32-rounded norm
    assert len(flow.lens_layers) == lm.adapter.n_layers + 1 and len(flow.tidy()) == lm.adapter.n_layers + 1


def test_contrast_targets_add_up_too():
    lm = tiny(tiny_llama)
    flow = information_flow(lm, PROMPT, contrast=("#5", "#9"))
    assert flow.target.kind == "logit difference"
    total = flow.embed_contribution + flow.attn_contribution.sum() + flow.mlp_contribution.sum() + \
        flow.constant_contribution
    assert total == pytest.approx(flow.value, rel=1e-6)  # float64 sums vs the model's float32-rounded norm


def test_graph_threshold_keeps_only_strong_components_and_edges_point_at_kept_nodes():
    lm = tiny(tiny_llama)
    flow = information_flow(lm, PROMPT)
    everything, all_edges = flow.graph(0.0)
    strong, strong_edges = flow.graph(0.2)
    components = [n for n in everything if n.kind in ("head", "mlp")]
    kept = [n for n in strong if n.kind in ("head", "mlp")]
    assert len(components) == lm.adapter.n_layers * (lm.adapter.n_heads + 1)
    assert all(abs(n.relevance) >= 0.2 * abs(flow.value) for n in kept) and len(kept) < len(components)
    ids = {n.id for n in strong}
    assert all(e.source in ids and e.target in ids for e in strong_edges)
    # the heads' totals are the latent relevance; the MLP totals are their neurons' relevance
    head = next(n for n in components if n.kind == "head")
    assert head.relevance == pytest.approx(float(flow.latent.heads[head.layer, head.index]))
    mlp = next(n for n in components if n.kind == "mlp")
    assert mlp.relevance == pytest.approx(float(flow.latent.neurons[mlp.layer].sum()))
    with pytest.raises(InterpscopeError, match="threshold"):
        flow.graph(1.5)


def test_value_edges_of_one_head_add_up_to_its_value_relevance():
    lm = tiny(tiny_gpt2)  # no grouped queries: each head has its own values
    flow = information_flow(lm, PROMPT)
    nodes, edges = flow.graph(0.0)
    layer, head = 1, 2
    into = sum(e.relevance for e in edges if e.target == f"h{layer}.{head}")
    assert into == pytest.approx(float(flow.latent.values_by_position[layer][:, head].sum()), rel=1e-9, abs=1e-12)


def test_attention_pattern_rows_are_distributions():
    lm = tiny(tiny_llama)
    lm.model.set_attn_implementation("eager")
    tokens, pattern = attention_pattern(lm, PROMPT, 1, 0)
    assert pattern.shape == (len(tokens), len(tokens))
    np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=1e-5)
    assert np.allclose(np.triu(pattern, 1), 0)
    with pytest.raises(InterpscopeError, match="No head"):
        attention_pattern(lm, PROMPT, 9, 0)


def test_mamba_is_refused_with_a_reason():
    from tests.tiny import tiny_mamba

    with pytest.raises(InterpscopeError, match="transformer"):
        information_flow(tiny(tiny_mamba), PROMPT, method="gradxinput")


@pytest.mark.bundled
def test_cli_flow_json_on_the_bundled_model(bundled_lm, tmp_path, capsys):
    """`interpscope flow` in this process (the session's SmolLM2, not a second load in a child process; the console
    entry point itself is tests/cli/test_cli.py's)."""
    from interpscope.cli import main

    out = tmp_path / "flow.json"
    code = main(["flow", "--text", "The capital of France is", "--threshold", "0.1", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["target"]["token"] == " Paris" and len(data["steps"]) == 31
    assert data["steps"][-1]["rank"] == 1 and data["steps"][0]["rank"] > 1
    kept = [n for n in data["nodes"] if n["kind"] in ("head", "mlp")]
    assert kept and all(abs(n["relevance"]) >= 0.1 * abs(data["value"]) for n in kept)
    capsys.readouterr()
    assert main(["flow", "--text", "x", "--threshold", "2"]) == 2  # a message and exit 2, not an exception
    err = capsys.readouterr().err
    assert "threshold" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_heads_pattern_runs_on_the_flows_own_tokens():
    """The flow page's head click showed the pattern over the text without its BOS (14 tokens) while the graph ran
    on 15: the pattern takes the flow's BOS choice, so its tokens are the flow's."""
    from interpscope.flow.information import information_flow

    class WithBos(_Tokenizer):  # a BOS the tokenizer does not add itself (SmolLM2's case): the flow prepends it
        bos_token_id = 2

    lm = loaded(tiny_llama(vocab=128).double().eval(), WithBos(), name="tiny_llama")
    lm.model.set_attn_implementation("eager")
    lengths = []
    for prepend in (True, False):
        flow = information_flow(lm, PROMPT, prepend_bos=prepend)
        tokens, pattern = attention_pattern(lm, PROMPT, 1, 0, prepend_bos=flow.bos_prepended)
        assert tokens == flow.tokens and pattern.shape == (len(flow.tokens), len(flow.tokens))
        lengths.append(len(tokens))
    assert lengths[0] == lengths[1] + 1 and information_flow(lm, PROMPT).bos_prepended  # the default prepends
