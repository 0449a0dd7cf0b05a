"""The fused attention rule (interpscope.relevance.attention_rule): one autograd node per attention layer with the
rule's factors on q, k and v, where the family runs Llama's eager attention, and qkv_scale's hooks elsewhere.

Checked here: its backward is autograd's through Llama's eager attention (factors 1), grouped-query heads and the
causal mask included; its forward is the family's eager attention bit for bit; over every family of the registry it
gives the relevance the hooks give (AttnLRP to rounding, CP-LRP exactly) and is taken exactly where the family's
eager attention is Llama's; the swap acts on its owner's passes only and leaves the modeling file as it found it."""
from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
import torch
from transformers.models.llama import modeling_llama

import interpscope.relevance.attention_rule as attention_rule
import interpscope.relevance.rules as rules_module
from interpscope.adapters import get_adapter
from interpscope.capture import eager_attention_of, foreign_hooks, override_attention
from interpscope.relevance import attnlrp_rules, attribute, cplrp_rules
from interpscope.relevance.rules import applied
from interpscope.relevance.targets import Target
from tests.families import FAMILIES, tiny_ids

ATTENTION = [name for name in FAMILIES if "attention" in FAMILIES[name].capabilities]
# the registry's families whose modeling file runs Llama's eager attention in transformers 5.x (Gemma 2 and 3
# soft-cap or window their scores, GPT-2 and NeoX have their own attention): the fused rule must be taken for these
LLAMA_FORM = {"llama", "smollm2", "qwen2", "qwen3", "mistral", "gemma", "olmo", "phi3", "mixtral", "qwen2_moe",
              "qwen3_moe", "olmoe"}


@functools.cache
def built(name: str):
    model = FAMILIES[name].build(torch.float64)
    return model, get_adapter(model)


def _eager_inputs(groups: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    batch, kv_heads, length, d_head = 2, 2, 5, 4
    query = torch.randn(batch, kv_heads * groups, length, d_head, generator=generator, dtype=torch.float64)
    key = torch.randn(batch, kv_heads, length, d_head, generator=generator, dtype=torch.float64)
    value = torch.randn(batch, kv_heads, length, d_head, generator=generator, dtype=torch.float64)
    mask = torch.full((length, length), float("-inf"), dtype=torch.float64).triu(1)[None, None].expand(batch, 1, -1, -1)
    upstream = torch.randn(batch, length, kv_heads * groups, d_head, generator=generator, dtype=torch.float64)
    return query, key, value, mask, upstream


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("factors", [(1.0, 1.0, 1.0), (0.25, 0.25, 0.5), (0.5, 2.0, 0.25), (0.0, 0.0, 1.0)])
def test_backward_is_autograds_through_llama_eager_times_the_factors(groups, factors):
    query, key, value, mask, upstream = _eager_inputs(groups)
    module = type("M", (), {"num_key_value_groups": groups, "training": False})()
    leaves = [t.clone().requires_grad_(True) for t in (query, key, value)]
    out, weights = modeling_llama.eager_attention_forward(module, *leaves, mask, scaling=0.5)
    expected = torch.autograd.grad((out * upstream).sum(), leaves)
    mine = [t.clone().requires_grad_(True) for t in (query, key, value)]
    fused_out, fused_weights = attention_rule._RuleAttention.apply(*mine, mask, 0.5, groups, factors,
                                                                   modeling_llama.repeat_kv)
    assert torch.equal(fused_out, out) and torch.equal(fused_weights, weights)  # the forward, bit for bit
    got = torch.autograd.grad((fused_out * upstream).sum(), mine)
    for g, e, c in zip(got, expected, factors, strict=True):
        assert torch.equal(g, c * e)  # autograd's numbers: the factors are powers of two here or exact


def test_detached_queries_and_keys_skip_the_softmax():
    query, key, value, mask, upstream = _eager_inputs(2)
    value = value.requires_grad_(True)
    out, _ = attention_rule._RuleAttention.apply(query, key, value, mask, 0.5, 2, (0.0, 0.0, 1.0),
                                                 modeling_llama.repeat_kv)
    (grad_v,) = torch.autograd.grad((out * upstream).sum(), [value])
    plain = value.detach().clone().requires_grad_(True)
    module = type("M", (), {"num_key_value_groups": 2, "training": False})()
    ref, _ = modeling_llama.eager_attention_forward(module, query, key, plain, mask, scaling=0.5)
    assert torch.equal(grad_v, torch.autograd.grad((ref * upstream).sum(), [plain])[0])


def _relevance(adapter, ids, target, make_rules, hooks_only: bool):
    if not hooks_only:
        return attribute(adapter, ids, target, make_rules(adapter))
    original = rules_module.attention_rule
    rules_module.attention_rule = rules_module.qkv_scale  # the same factors through the projections' hooks
    try:
        return attribute(adapter, ids, target, make_rules(adapter))
    finally:
        rules_module.attention_rule = original


@pytest.mark.parametrize("name", ATTENTION)
def test_fused_rule_is_taken_where_llama_eager_runs_and_matches_the_hooks(name, monkeypatch):
    model, adapter = built(name)
    fusable = attention_rule.fusable_attention(adapter) is not None
    assert fusable == (name in LLAMA_FORM)
    calls = []
    original_apply = attention_rule._RuleAttention.apply
    monkeypatch.setattr(attention_rule._RuleAttention, "apply",
                        lambda *args: calls.append(1) or original_apply(*args))
    ids = tiny_ids(seed=3)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    token = int(logits.argmax())
    target = Target(ids.shape[1] - 1, token)
    for make_rules, tolerance in ((attnlrp_rules, 1e-10), (cplrp_rules, 0.0)):
        calls.clear()
        fused = _relevance(adapter, ids, target, make_rules, hooks_only=False)
        assert len(calls) == (adapter.n_layers if fusable else 0)
        hooked = _relevance(adapter, ids, target, make_rules, hooks_only=True)
        assert fused.logit == hooked.logit  # the fused forward changes no value
        assert abs(fused.logit - float(logits[token])) <= 1e-6 * max(1.0, abs(fused.logit))  # the model's logit
        scale = np.abs(hooked.relevance).max()
        assert np.abs(fused.relevance - hooked.relevance).max() <= tolerance * scale
        a, b = fused.conservation, hooked.conservation
        assert abs(a.softmax_sum - b.softmax_sum) <= 1e-10 * abs(a.target_logit)
    module = adapter.attention(0)
    assert eager_attention_of(module) is not None or not fusable
    if fusable:  # the modeling file's global is its own function again
        assert inspect_global(module) is eager_attention_of(module)
    assert foreign_hooks(model) == []


def inspect_global(module):
    import inspect

    return inspect.unwrap(type(module).forward).__globals__["eager_attention_forward"]


def test_the_swap_acts_on_its_owner_only():
    model, adapter = built("llama")
    ids = tiny_ids(seed=4)
    with torch.no_grad():
        clean = model(input_ids=ids).logits
    seen: dict[str, object] = {}

    def foreign_pass():  # another session's plain pass while the rule is on: the original attention runs
        calls_before = len(owner_calls)
        with torch.no_grad():
            seen["logits"] = model(input_ids=ids).logits
        seen["fused_calls"] = len(owner_calls) - calls_before

    owner_calls: list[int] = []

    def counting(module, *args, **kwargs):
        owner_calls.append(1)
        return eager_attention_of(module)(module, *args, **kwargs)

    modules = attention_rule.fusable_attention(adapter)
    assert modules is not None
    with override_attention(modules, counting):
        other = threading.Thread(target=foreign_pass)
        other.start()
        other.join()
        with torch.no_grad():
            model(input_ids=ids)
    assert seen["fused_calls"] == 0 and torch.equal(seen["logits"], clean)
    assert len(owner_calls) == adapter.n_layers  # the owner's own pass went through the override
    assert inspect_global(modules[0]) is eager_attention_of(modules[0])
    with applied(adapter, attnlrp_rules(adapter)):  # nested use by the rules leaves nothing behind either
        pass
    assert inspect_global(modules[0]) is eager_attention_of(modules[0])


def test_an_override_twice_by_one_run_is_refused():
    model, adapter = built("llama")
    modules = attention_rule.fusable_attention(adapter)
    with override_attention(modules, lambda *a, **k: None):
        with pytest.raises(RuntimeError, match="already overridden"), override_attention(modules[:1], print):
            pass
    assert inspect_global(modules[0]) is eager_attention_of(modules[0])
