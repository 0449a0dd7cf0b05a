"""The checks of docs/methods/mamba-lrp.md on a tiny random MambaForCausalLM (hidden 16, state 4, 2 layers,
float64)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from interpscope.adapters import get_adapter
from interpscope.config import InterpscopeError
from interpscope.relevance import attribute, get_method, methods_for
from interpscope.relevance.mamba.analysis import conservation, conservation_by_disabled_fix, relevance_by_distance
from interpscope.relevance.mamba.forward import (
    FIX_NAMES,
    Fixes,
    backbone_forward,
    gate_product,
    selective_scan_chunked,
    selective_scan_sequential,
    silu,
    stabilise,
)
from interpscope.relevance.mamba.rule import MambaLRPRule, mamba_lrp
from interpscope.relevance.targets import Target
from tests.tiny import tiny_llama, tiny_mamba

T = 12


@pytest.fixture(scope="module")
def model():
    """Tiny random Mamba with random (HF initialises them to zero) conv1d biases."""
    tiny = tiny_mamba(seed=3).double()
    adapter = get_adapter(tiny)
    with torch.no_grad():
        for layer in range(adapter.n_layers):
            adapter.mixer(layer).conv1d.bias.normal_(0.0, 0.3)
    return tiny


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(11)
    return torch.randint(0, 128, (1, T))


def predicted(model, ids) -> Target:
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, -1]
    return Target(ids.shape[1] - 1, int(logits.argmax()))


def zero_conv_bias(model):
    """A copy of the model whose conv1d biases are zero (so inputs alone must carry all relevance)."""
    clone = tiny_mamba(seed=3).double()
    clone.load_state_dict(model.state_dict())
    adapter = get_adapter(clone)
    with torch.no_grad():
        for layer in range(adapter.n_layers):
            adapter.mixer(layer).conv1d.bias.zero_()
    return clone


@pytest.mark.parametrize("fixes", [Fixes(), Fixes.none()], ids=["all-fixes", "no-fixes"])
def test_patched_forward_reproduces_hf_logits(model, ids, fixes):
    with torch.no_grad():
        reference = model(input_ids=ids, use_cache=False).logits
        adapter = get_adapter(model)
        direct = backbone_forward(adapter, adapter.embedding()(ids), fixes)
        with mamba_lrp(model, fixes):
            through_rule = model(input_ids=ids, use_cache=False).logits
    assert (direct - reference).abs().max() < 1e-5   # HF's RMSNorm runs in float32
    assert (through_rule - reference).abs().max() < 1e-5
    assert (direct - through_rule).abs().max() < 1e-6      # HF casts its logits to float32


def test_chunked_training_scan_matches_sequential_scan():
    torch.manual_seed(0)
    x, delta = torch.randn(2, 20, 6, dtype=torch.float64), F.softplus(torch.randn(2, 20, 6, dtype=torch.float64))
    A = -torch.rand(6, 4, dtype=torch.float64) - 0.1
    B, C = torch.randn(2, 20, 4, dtype=torch.float64), torch.randn(2, 20, 4, dtype=torch.float64)
    exact = selective_scan_sequential(x, delta, A, B, C)
    assert torch.allclose(selective_scan_chunked(x, delta, A, B, C, chunk=8), exact, atol=1e-10)


def test_all_fixes_conserve_exactly_with_conv_bias_zeroed(model, ids):
    clean = zero_conv_bias(model)
    result = conservation(clean, ids, predicted(clean, ids), Fixes())
    assert result.conv_bias_sum == 0.0
    assert abs(result.input_sum - result.target_logit) / abs(result.target_logit) < 1e-6
    assert result.relative_error < 1e-6


def test_each_fix_switched_off_raises_the_conservation_error(model, ids):
    clean = zero_conv_bias(model)
    ablation = conservation_by_disabled_fix(clean, ids, predicted(clean, ids))
    errors = dict(zip(ablation.labels, ablation.relative_errors, strict=True))
    base = errors["all fixes on"]
    for name in FIX_NAMES:
        assert errors[f"{name} off"] > 10 * base, (name, errors)
    assert errors["no fixes (Gradient x Input)"] > 10 * base


def test_conv_bias_absorbs_its_share(model, ids):
    target = predicted(model, ids)
    result = conservation(model, ids, target, Fixes())
    y = result.target_logit
    assert abs(result.conv_bias_sum) > 1e-3 * abs(y)          # the bias share is real, not a rounding residue
    assert abs(result.input_sum + result.conv_bias_sum - y) / abs(y) < 1e-6
    assert result.other_bias_sum == pytest.approx(0.0, abs=1e-12)   # dt_proj bias sits in the detached SSM path
    assert abs(result.input_sum - y) / abs(y) > 1e-4


def test_half_rule_gives_each_factor_half():
    torch.manual_seed(1)
    y = torch.randn(5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, dtype=torch.float64, requires_grad=True)
    out = gate_product(y, g, half_rule=True)
    assert torch.equal(out, y * g)
    grad_y, grad_g = torch.autograd.grad(out.sum(), [y, g])
    half = (y * g / 2).detach()
    assert torch.allclose(y.detach() * grad_y, half) and torch.allclose(g.detach() * grad_g, half)


def test_silu_identity_rule_keeps_the_value_and_passes_x_times_ratio():
    x = torch.tensor([-2.0, -0.3, 0.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)
    out = silu(x, identity_rule=True)
    assert torch.equal(out, F.silu(x))
    (grad,) = torch.autograd.grad(out.sum(), [x])
    assert torch.allclose(x.detach() * grad, F.silu(x.detach()), atol=1e-8)
    assert stabilise(torch.zeros(1, dtype=torch.float64)).item() > 0


def test_engine_attribute_matches_the_accounting_and_mambalrp_is_offered_for_mamba(model, ids):
    target = predicted(model, ids)
    adapter = get_adapter(model)
    via_engine = attribute(adapter, ids, target, get_method("mambalrp", adapter).rules(adapter))
    direct = conservation(model, ids, target, Fixes())
    np.testing.assert_allclose(via_engine.relevance, direct.relevance, atol=1e-12)
    assert via_engine.conservation.relative_error < 1e-6
    assert methods_for(adapter)[0].name == "mambalrp"
    llama = get_adapter(tiny_llama())
    assert "mambalrp" not in [m.name for m in methods_for(llama)]
    with pytest.raises(InterpscopeError, match="state_space"):
        get_method("mambalrp", llama)
    with pytest.raises(InterpscopeError):
        MambaLRPRule().apply(get_adapter(tiny_llama())).__enter__()


def test_rule_is_undone_on_exit_and_after_an_exception(model, ids):
    adapter = get_adapter(model)
    with torch.no_grad():
        before = model(input_ids=ids, use_cache=False).logits
    with pytest.raises(RuntimeError):
        with mamba_lrp(model):
            assert "forward" in adapter.mixer(0).__dict__
            raise RuntimeError("boom")
    for layer in range(adapter.n_layers):
        assert "forward" not in adapter.mixer(layer).__dict__
        assert "forward" not in adapter.attention_norm(layer).__dict__
    assert "forward" not in adapter.final_norm().__dict__
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, use_cache=False).logits, before)


def test_other_threads_keep_the_plain_forward(model, ids):
    embeds = get_adapter(model).embedding()(ids).detach()
    seen = {}

    def other_thread():
        seen["hf_mixer_called"] = False
        with torch.enable_grad():
            emb = embeds.clone().requires_grad_(True)
            value = model(inputs_embeds=emb, use_cache=False).logits[0, -1, 0]
            seen["grad"] = torch.autograd.grad(value, [emb])[0]

    with torch.enable_grad():
        emb = embeds.clone().requires_grad_(True)
        plain = torch.autograd.grad(model(inputs_embeds=emb, use_cache=False).logits[0, -1, 0], [emb])[0]
    with mamba_lrp(model):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert torch.allclose(seen["grad"], plain, atol=1e-8)


def test_relevance_by_distance_aggregates_shares_from_the_end():
    maps = [np.array([1.0, -1.0, 2.0]), np.array([0.0, 4.0])]
    profile = relevance_by_distance(maps)
    np.testing.assert_allclose(profile.share, [(0.5 + 1.0) / 2, (0.25 + 0.0) / 2, 0.25])
    np.testing.assert_allclose(profile.signed, [(0.5 + 1.0) / 2, (-0.25 + 0.0) / 2, 0.25])
    assert profile.counts.tolist() == [2, 2, 1] and profile.n_prompts == 2


def test_without_conv_bias_and_with_a_float32_residual_the_rules_still_conserve(ids):
    tiny = tiny_mamba(seed=5, use_conv_bias=False, residual_in_fp32=False).double()
    result = conservation(tiny, ids, predicted(tiny, ids), Fixes())
    assert result.conv_bias_sum == 0.0 and result.relative_error < 1e-6
