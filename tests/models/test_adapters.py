"""Every adapter names the right places on tiny random models, and capture reproduces HF hidden states."""
from __future__ import annotations

import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.capture import capture, hooks
from interpscope.config import InterpscopeError
from interpscope.models.tokenizers import gpt2_tokenizer
from tests.tiny import FACTORIES, FAMILY_OF

FAMILIES = list(FACTORIES)


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request):
    model = FACTORIES[request.param]()
    return request.param, model, get_adapter(model)


def test_family_detected(family_model):
    family, _, adapter = family_model
    assert adapter.family == FAMILY_OF.get(family, family)


def test_every_hook_point_has_the_right_shape(family_model):
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 9))
    names = adapter.hook_points()
    result = capture(adapter, ids, names)
    assert result.logits.shape == (9, adapter.vocab_size)
    for name in names:
        tensor = result.activations[name]
        width = adapter.d_mlp if name.endswith("mlp.hook_post") else adapter.d_model
        assert tensor.shape == (9, width), name


def test_capture_reproduces_output_hidden_states(family_model):
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 7))
    result = capture(adapter, ids, adapter.hook_points())
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    hidden = [h[0] for h in out.hidden_states]
    n = adapter.n_layers
    if family == "mamba":  # HF Mamba lists each block's output, then the final normed state
        expected = {f"blocks.{layer}.hook_resid_post": hidden[layer] for layer in range(n)}
    else:  # embeddings (after positions), then each block's input
        expected = {f"blocks.{layer}.hook_resid_pre": hidden[layer] for layer in range(n)}
    expected["ln_final.hook_normalized"] = hidden[-1]
    for name, reference in expected.items():
        torch.testing.assert_close(result.activations[name], reference, rtol=0, atol=1e-6, msg=name)
    torch.testing.assert_close(result.logits, out.logits[0], rtol=0, atol=0)


def test_residual_stream_adds_up(family_model):
    """resid_post = resid_pre + attn_out + mlp_out (or + mixer_out): the names point at the right modules."""
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 6))
    acts = capture(adapter, ids, adapter.hook_points()).activations
    for layer in range(adapter.n_layers):
        pre = acts[f"blocks.{layer}.hook_resid_pre"]
        parts = [acts[f"blocks.{layer}.hook_{p}_out"] for p in ("attn", "mlp", "mixer")
                 if f"blocks.{layer}.hook_{p}_out" in acts]
        torch.testing.assert_close(pre + sum(parts), acts[f"blocks.{layer}.hook_resid_post"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "mamba"])
def test_neuron_activations_times_w_out_give_mlp_out(family):
    model = FACTORIES[family]()
    adapter = get_adapter(model)
    assert adapter.has_mlp
    ids = torch.randint(0, 100, (1, 5))
    acts = capture(adapter, ids, adapter.hook_points()).activations
    for layer in range(adapter.n_layers):
        neurons = acts[f"blocks.{layer}.mlp.hook_post"]
        bias = adapter.b_out(layer)
        rebuilt = neurons @ adapter.W_out(layer).detach() + (bias.detach() if bias is not None else 0)
        output_norm = adapter.mlp_output_norm(layer)  # Gemma 3 normalises the MLP's output before the residual
        if output_norm is not None:
            with torch.no_grad():
                rebuilt = adapter.norm_forward(output_norm, rebuilt)
        torch.testing.assert_close(rebuilt, acts[f"blocks.{layer}.hook_mlp_out"], rtol=1e-5, atol=1e-5)


def test_folded_final_norm_reproduces_the_logits(family_model):
    """The adapter's folded norm (gamma the family's way: 1 + w for Gemma, ones for weightless OLMo) and W_U give
    the model's own logits from the last residual."""
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 6))
    result = capture(adapter, ids, [f"blocks.{adapter.n_layers - 1}.hook_resid_post"])
    residual = result.activations[f"blocks.{adapter.n_layers - 1}.hook_resid_post"]
    with torch.no_grad():
        logits = adapter.folded_norm().apply(residual) @ adapter.W_U().detach()
        via_unembedding = (adapter.folded_norm().centre(residual) / adapter.folded_norm().scale(residual)[:, None]
                           ) @ adapter.folded_unembedding()
    bias = adapter.b_U()
    if bias is not None:
        logits, via_unembedding = logits + bias.detach(), via_unembedding + bias.detach()
    if adapter.folded_norm().beta is not None:
        via_unembedding = via_unembedding + adapter.folded_norm().beta @ adapter.W_U().detach()
    torch.testing.assert_close(logits, result.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(via_unembedding, result.logits, rtol=1e-4, atol=1e-4)


def test_unembedding_reproduces_logits(family_model):
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 5))
    result = capture(adapter, ids, ["ln_final.hook_normalized"])
    bias = adapter.b_U()
    logits = result.activations["ln_final.hook_normalized"] @ adapter.W_U().detach()
    if bias is not None:
        logits = logits + bias.detach()
    torch.testing.assert_close(logits, result.logits, rtol=1e-5, atol=1e-5)


def test_hooks_edit_and_are_removed_even_after_errors(family_model):
    family, model, adapter = family_model
    ids = torch.randint(0, 100, (1, 5))
    with torch.no_grad():
        clean = model(ids).logits
    name = f"blocks.{adapter.n_layers - 1}.hook_resid_post"
    with hooks(adapter, {name: lambda t: torch.zeros_like(t)}), torch.no_grad():
        zeroed = model(ids).logits
    assert not torch.allclose(zeroed, clean)
    with pytest.raises(RuntimeError):
        with hooks(adapter, {name: lambda t: torch.zeros_like(t)}):
            raise RuntimeError("boom")
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, clean, rtol=0, atol=0)


def test_unknown_hook_names_are_explained(family_model):
    _, _, adapter = family_model
    with pytest.raises(InterpscopeError, match="Unknown hook point"):
        adapter.resolve("blocks.0.hook_nonsense")
    with pytest.raises(InterpscopeError, match="out of range"):
        adapter.resolve(f"blocks.{adapter.n_layers}.hook_resid_post")


def test_gpt2_with_the_real_tokenizer():
    tokenizer = gpt2_tokenizer()
    ids = tokenizer("Hello world, said Emma.", return_tensors="pt").input_ids
    assert ids[0].tolist() == [15496, 995, 11, 531, 18966, 13]
    model = FACTORIES["gpt2"]()
    adapter = get_adapter(model)
    result = capture(adapter, ids, ["hook_embed", "blocks.1.hook_resid_post"])
    assert adapter.vocab_size == len(tokenizer) == 50257
    torch.testing.assert_close(result.activations["hook_embed"], adapter.W_E()[ids[0]].detach())


def test_mamba_offers_mixer_places_and_no_mlp():
    adapter = get_adapter(FACTORIES["mamba"]())
    names = adapter.hook_points()
    assert "blocks.0.hook_mixer_out" in names
    assert not any("mlp" in n or "attn" in n for n in names)
    with pytest.raises(InterpscopeError, match="no mlp.hook_post"):
        adapter.resolve("blocks.0.mlp.hook_post")


def test_unsupported_model_type_is_refused():
    model = torch.nn.Linear(2, 2)
    model.config = type("C", (), {"model_type": "bert"})()
    with pytest.raises(InterpscopeError, match="Unsupported model type 'bert'"):
        get_adapter(model)
