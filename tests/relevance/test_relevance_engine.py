"""docs/methods/attnlrp.md checks on tiny random Llama, GPT-2, GPT-NeoX, Qwen2, Gemma 3 and OLMo models in float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.relevance import attnlrp_rules, attribute, cplrp_rules
from interpscope.relevance.targets import Target
from tests.tiny import relevance_model, tiny_ids

FAMILIES = ["llama", "gpt2", "gpt_neox", "qwen2", "gemma3", "olmo"]
WITH_BIASES = {"gpt2", "gpt_neox", "qwen2"}


def predicted_target(model, ids) -> Target:
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    return Target(ids.shape[1] - 1, int(logits.argmax()))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_cplrp_conserves_exactly_on_bias_free_model(family, attn):
    model = relevance_model(family, attn=attn, bias_free=True)
    adapter = get_adapter(model)
    ids = tiny_ids()
    target = predicted_target(model, ids)
    result = attribute(adapter, ids, target, cplrp_rules(adapter), latent=True)
    bias_share = result.conservation.bias_sum  # GPT-2's position embeddings count as a bias term
    if family != "gpt2":
        assert (bias_share or 0.0) == 0.0  # zeroed biases (or none) take nothing
    from interpscope.relevance.engine import bias_parameters
    # no bias parameter and no learned position embedding at all: the share does not apply (absent, not 0)
    assert (bias_share is None) == (not bias_parameters(model) and adapter.position_embedding() is None)
    assert abs(result.relevance.sum() + (bias_share or 0.0) - result.logit) / abs(result.logit) < 1e-10
    assert abs(result.conservation.softmax_sum) < 1e-12 * abs(result.logit) + 1e-14
    # layer by layer: the residual stream carries everything except what the position embeddings took
    residual_sums = result.latent.residual.sum(axis=1)
    np.testing.assert_allclose(residual_sums, result.logit, rtol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_cplrp_bias_accounting(family):
    model = relevance_model(family, bias_free=False)
    adapter = get_adapter(model)
    ids = tiny_ids(seed=3)
    target = predicted_target(model, ids)
    result = attribute(adapter, ids, target, cplrp_rules(adapter))
    conservation = result.conservation
    if family in WITH_BIASES:  # GPT-2 / NeoX / Qwen2 carry biases: they take a real share
        assert abs(conservation.bias_sum) > 1e-3 * abs(result.logit)
        assert abs(conservation.input_sum - result.logit) > 1e-3 * abs(result.logit)
    assert abs(conservation.input_sum + (conservation.bias_sum or 0.0) - result.logit) / abs(result.logit) < 1e-10
    assert conservation.relative_error < 1e-10


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_attnlrp_conserves_only_with_softmax_share(family, attn):
    model = relevance_model(family, attn=attn, bias_free=False)
    adapter = get_adapter(model)
    ids = tiny_ids(seed=2)
    result = attribute(adapter, ids, predicted_target(model, ids), attnlrp_rules(adapter))
    conservation = result.conservation
    y = result.logit
    assert abs(conservation.softmax_sum) > 1e-3 * abs(y)  # AttnLRP alone does not conserve
    assert abs(conservation.input_sum + (conservation.bias_sum or 0.0) - y) > 1e-3 * abs(y)
    total = conservation.input_sum + (conservation.bias_sum or 0.0) + conservation.softmax_sum
    assert abs(total - y) / abs(y) < 1e-10


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_x_input_breaks_conservation(family):
    model = relevance_model(family, bias_free=True)
    adapter = get_adapter(model)
    ids = tiny_ids(seed=4)
    target = predicted_target(model, ids)
    plain = attribute(adapter, ids, target, [])
    lrp = attribute(adapter, ids, target, cplrp_rules(adapter))
    gap_plain = abs(plain.relevance.sum() + (plain.conservation.bias_sum or 0.0) - plain.logit) / abs(plain.logit)
    gap_lrp = abs(lrp.relevance.sum() + (lrp.conservation.bias_sum or 0.0) - lrp.logit) / abs(lrp.logit)
    assert gap_plain > 0.05
    assert gap_lrp < 1e-10


# --- an independent softmax share: 1/2 * sum(A * g_A - S * g_S) from a capturing attention kernel -----------
_CAPTURED: list[dict] = []


def _capturing_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = (query @ key.transpose(-1, -2)) * scaling
    n = scores.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=scores.device).tril()
    if attention_mask is not None:  # the model's own mask, when it builds one
        mask = attention_mask[0, 0, :, :n]
        causal = mask if mask.dtype == torch.bool else mask == 0
    window = kwargs.get("sliding_window")
    if window:  # Gemma 3's sliding-window layers: key j is visible from query i when i - j < window
        rows = torch.arange(n, device=scores.device)
        causal = causal & ((rows[:, None] - rows[None, :]) < window)
    masked = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(masked, dim=-1)
    if scores.requires_grad:
        record = {"S": scores, "A": probs, "mask": causal}
        _CAPTURED.append(record)
        scores.register_hook(lambda g: record.__setitem__("gS", g))
        probs.register_hook(lambda g: record.__setitem__("gA", g))
    return (probs @ value).transpose(1, 2), probs


@pytest.mark.parametrize("family", FAMILIES)
def test_softmax_share_matches_methods_formula(family):
    from transformers import AttentionInterface

    AttentionInterface.register("relevance_capture", _capturing_attention)
    model = relevance_model(family, attn="relevance_capture", bias_free=False)
    reference = relevance_model(family, attn="eager", bias_free=False)
    ids = tiny_ids(seed=5)
    with torch.no_grad():
        np.testing.assert_allclose(model(input_ids=ids).logits.numpy(), reference(input_ids=ids).logits.numpy(),
                                   rtol=1e-4, atol=1e-5)  # eager Llama runs its softmax in float32
    adapter = get_adapter(model)
    _CAPTURED.clear()
    result = attribute(adapter, ids, predicted_target(model, ids), attnlrp_rules(adapter))
    captured = _CAPTURED[-adapter.n_layers:]
    expected = []
    for record in captured:
        scores = record["S"].detach().masked_fill(~record["mask"], 0.0)
        a_term = (record["A"].detach() * record["gA"]).sum()
        s_term = (scores * record["gS"].masked_fill(~record["mask"], 0.0)).sum()
        expected.append(float(0.5 * (a_term - s_term)))
    np.testing.assert_allclose(result.conservation.softmax_by_layer, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_relevance_at_hook_points_from_the_same_pass(family):
    model = relevance_model(family, bias_free=True)
    adapter = get_adapter(model)
    ids = tiny_ids(seed=6)
    target = predicted_target(model, ids)
    point = "blocks.1.hook_resid_pre"
    result = attribute(adapter, ids, target, cplrp_rules(adapter), latent=True, points=[point])
    per_token = result.points[point].sum(-1)
    np.testing.assert_allclose(per_token, result.latent.residual[1], rtol=1e-12, atol=1e-14)
    assert result.latent.heads.shape == (adapter.n_layers, adapter.n_heads)
    assert result.latent.neurons.shape == (adapter.n_layers, adapter.d_mlp)
    assert np.abs(result.latent.heads).sum() > 0 and np.abs(result.latent.neurons).sum() > 0
