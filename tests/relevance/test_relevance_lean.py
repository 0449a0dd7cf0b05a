"""The leaner relevance pass (bench/relevance_lxt.py measures it) computes what the plain rules say: the activation
rule's gradient is f(x) / x (0 at exact zeros) times its scale, a number scale and a per-feature scale give the same
gradients, rules leave in the order they came, and the garbage collector is paused only while passes run."""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from interpscope.adapters import get_adapter
from interpscope.capture import model_lock
from interpscope.relevance.engine import _cycle_collection_paused, attribute
from interpscope.relevance.rules import ActivationRule, NormRule, OutputGradScale, applied, attnlrp_rules
from interpscope.relevance.targets import Target
from tests.tiny import FAMILIES, relevance_model, tiny_ids


def _activation_grad(scale: float, x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """Gradient at x through ActivationRule(scale)'s hook on a SiLU."""
    act = nn.SiLU()
    leaf = x.clone().requires_grad_(True)
    out = ActivationRule(scale)._hook(act, (leaf,), act(leaf))
    assert torch.equal(out.detach(), torch.nn.functional.silu(x))  # the native value, bit for bit
    (grad,) = torch.autograd.grad(out, [leaf], upstream)
    return grad


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_activation_rule_gradient_is_f_over_x(scale):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 11, generator=generator, dtype=torch.float64)
    x[0, 0, :4] = 0.0  # exact zeros: f(x) / x is taken as 0 there
    x[1, 2, 3] = -0.0
    upstream = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    expected = upstream * torch.where(x == 0, torch.zeros_like(x), torch.nn.functional.silu(x) / x) * scale
    grad = _activation_grad(scale, x, upstream)
    assert torch.equal(grad, expected)
    assert bool((grad[0, 0, :4] == 0).all()) and bool(grad[1, 2, 3] == 0)
    assert bool(torch.isfinite(grad).all())


def test_number_and_per_feature_scales_give_the_same_gradient():
    generator = torch.Generator().manual_seed(1)
    linear = nn.Linear(5, 6).double()
    x = torch.randn(2, 3, 5, generator=generator, dtype=torch.float64)
    upstream = torch.randn(2, 3, 6, generator=generator, dtype=torch.float64)

    def grad_with(scale) -> torch.Tensor:
        leaf = x.clone().requires_grad_(True)
        out = OutputGradScale._hook(scale)(linear, (leaf,), linear(leaf))
        return torch.autograd.grad(out, [leaf], upstream)[0]

    reference = (upstream * 0.25) @ linear.weight.detach()
    assert torch.allclose(grad_with(0.25), reference, rtol=0, atol=1e-15)
    assert torch.equal(grad_with(0.25), grad_with(torch.full((6,), 0.25, dtype=torch.float64)))
    # different factors per feature (a fused projection): each output feature's gradient scaled by its own factor
    parts = torch.tensor([0.25, 0.25, 0.5, 0.5, 1.0, 1.0], dtype=torch.float64)
    assert torch.allclose(grad_with(parts), (upstream * parts) @ linear.weight.detach(), rtol=0, atol=1e-15)
    leaf = x.clone().requires_grad_(True)
    detached = OutputGradScale._hook(0.0)(linear, (leaf,), linear(leaf))
    assert not detached.requires_grad


def test_a_scale_of_one_registers_no_hook():
    model = relevance_model("llama")
    adapter = get_adapter(model)
    modules = [module for layer in range(adapter.n_layers) for module, _ in adapter.attention_qkv(layer)]
    rule = OutputGradScale("v-only", lambda a: [(m, 1.0) for m in modules[:-1]] + [(modules[-1], 0.5)])
    with model_lock(model), applied(adapter, [rule]):
        assert [len(m._forward_hooks) for m in modules] == [0] * (len(modules) - 1) + [1]
    assert all(len(m._forward_hooks) == 0 for m in modules)


def test_rules_leave_in_the_order_they_came():
    """Oldest first, so each removal finds its hook first in interpscope.capture's book of active hooks."""
    model = relevance_model("llama")
    adapter = get_adapter(model)
    left: list[str] = []

    class Marker:
        def __init__(self, name: str):
            self.name = name

        def apply(self, adapter):
            @contextmanager
            def entered():
                try:
                    yield
                finally:
                    left.append(self.name)
            return entered()

    with model_lock(model), applied(adapter, [Marker("a"), Marker("b"), Marker("c")]):
        pass
    assert left == ["a", "b", "c"]
    with pytest.raises(ValueError), model_lock(model), applied(adapter, [Marker("d"), Marker("e")]):
        raise ValueError("inside")
    assert left[3:] == ["d", "e"]  # all left, also after an exception


def test_the_collector_is_paused_only_while_passes_run():
    assert gc.isenabled()
    model = relevance_model("llama")
    adapter = get_adapter(model)
    seen: list[bool] = []
    handle = model.model.layers[0].register_forward_hook(lambda *args: seen.append(gc.isenabled()))
    try:
        with model_lock(model):
            attribute(adapter, tiny_ids(), Target(position=3, token_id=5), attnlrp_rules(adapter))
    finally:
        handle.remove()
    assert seen == [False] and gc.isenabled()
    # nested and overlapping (threads): enabled again only when the last one leaves, and left off if it was off
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with _cycle_collection_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with _cycle_collection_paused():
        thread.start()
        inside.wait(5)
    assert not gc.isenabled()  # the other pass still runs
    release.set()
    thread.join(5)
    assert gc.isenabled()
    gc.disable()
    try:
        with _cycle_collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("latent", [False, True])
def test_a_pass_leaves_no_reference_cycles(latent):
    """What a pass allocates is freed by reference counting (the collector, paused during it, has nothing to find):
    no hook closure holding its owner, no tapped tensor kept alive for a later collection."""
    model = relevance_model("llama")
    adapter = get_adapter(model)
    target = Target(position=3, token_id=5)
    with model_lock(model):
        attribute(adapter, tiny_ids(), target, attnlrp_rules(adapter), latent=latent)  # first-call caches
    gc.collect()
    with model_lock(model):
        result = attribute(adapter, tiny_ids(), target, attnlrp_rules(adapter), latent=latent)
    del result
    assert gc.collect() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family", [name for name in FAMILIES if name != "mamba"])
def test_norm_rule_keeps_the_modules_output_and_the_identity_gradient(family, dtype):
    """The rule's forward (swapped in for the run) gives the norm's own value: a float32 RMS norm's output bit for
    bit (so the explained logit is the model's), otherwise the same operations written out at the input's precision
    (HF's RMS norms compute a float64 input in float32); the gradient is centre(grad * gamma / scale(x)), the scale
    computed as the family computes it (RMS or centred, 1 + w gain, weightless, per-head q/k norms). Every
    decoder family of the registry, every norm the adapter lists."""
    model = FAMILIES[family].build(dtype=dtype)
    adapter = get_adapter(model)
    generator = torch.Generator().manual_seed(2)
    for norm in adapter.norms():
        spec = adapter.norm_spec(norm)
        width = norm.weight.shape[-1] if getattr(norm, "weight", None) is not None else adapter.d_model
        x = torch.randn(2, 5, width, generator=generator, dtype=dtype, requires_grad=True)
        native = norm(x)
        out = NormRule.forward_for(adapter, norm)(x)
        written = adapter.norm_forward(norm, x.detach(), detach_scale=True)
        assert torch.equal(out.detach(), native.detach() if dtype == torch.float32 and not spec.centred else written)
        assert torch.allclose(out.detach(), native.detach(), rtol=1e-5, atol=1e-6)
        upstream = torch.randn(native.shape, generator=generator, dtype=dtype)
        (grad,) = torch.autograd.grad(out, [x], upstream)
        centred = x.detach() - x.detach().mean(-1, keepdim=True) if spec.centred else x.detach()
        inv = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + adapter.norm_eps(norm))
        gamma = adapter.norm_gamma(norm)
        expected = upstream * (1.0 if gamma is None else gamma.detach()) * inv
        if spec.centred:
            expected = expected - expected.mean(-1, keepdim=True)
        tolerance = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(grad, expected, rtol=tolerance, atol=tolerance * 1e-2)


def test_norm_rule_swaps_the_forward_for_its_own_run_only():
    """While the rule is on in one thread, another thread's pass through the same norm runs the module's own
    forward (with its gradient through the normaliser); after the block the module has no instance forward left."""
    model = FAMILIES["llama"].build()
    adapter = get_adapter(model)
    norm = adapter.norms()[0]
    x = torch.randn(1, 3, adapter.d_model, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(1, 3, adapter.d_model, dtype=torch.float64)
    (plain,) = torch.autograd.grad(norm(x), [x], upstream)
    seen: dict[str, torch.Tensor] = {}

    def other_thread():
        (seen["grad"],) = torch.autograd.grad(norm(x), [x], upstream)

    with applied(adapter, [NormRule()]):
        (ruled,) = torch.autograd.grad(norm(x), [x], upstream)
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert not torch.allclose(ruled, plain)  # the rule changed this thread's gradient
    assert torch.equal(seen["grad"], plain)  # and not the other thread's
    assert "forward" not in norm.__dict__
    (after,) = torch.autograd.grad(norm(x), [x], upstream)
    assert torch.equal(after, plain)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", [name for name in FAMILIES if name != "mamba"])
def test_conservation_from_sums_equals_the_per_element_readout(family, dtype):
    """Without latent views the readout sums h * grad directly (products at the model's precision, summed in
    float64) and books what enters q/k/v at the attention's input plus the projections' biases; with them it taps
    every projection's output and sums the per-element float64 relevance the views show: the same books to
    rounding in every decoder family (fused projections, q/k/v biases, per-head q/k norms, parallel blocks, experts).
    In float32 the products round (half a unit in the last place each): agreement to 1e-6."""
    model = FAMILIES[family].build(dtype=dtype)
    adapter = get_adapter(model)
    target = Target(position=3, token_id=5)
    with model_lock(model):
        lean = attribute(adapter, tiny_ids(), target, attnlrp_rules(adapter)).conservation
        full = attribute(adapter, tiny_ids(), target, attnlrp_rules(adapter), latent=True).conservation
    assert lean is not None and full is not None
    has_bias = any(name.endswith("bias") for name, _ in model.named_parameters())
    assert (lean.bias_sum is not None and lean.bias_sum != 0.0) == has_bias
    assert (full.bias_sum is None) == (lean.bias_sum is None)
    rel, tol = (1e-12, 1e-12) if dtype == torch.float64 else (1e-6, 1e-6 * max(1.0, abs(full.target_logit)))
    for name in ("input_sum", "bias_sum", "softmax_sum", "target_logit"):
        if getattr(full, name) is not None:
            assert getattr(lean, name) == pytest.approx(getattr(full, name), rel=rel, abs=tol)
    assert lean.softmax_by_layer == pytest.approx(full.softmax_by_layer, rel=rel, abs=tol)
    assert abs(sum(lean.softmax_by_layer)) > 1e-6  # AttnLRP's softmax share is there to be booked


def test_lookups_kept_per_adapter_land_on_that_models_modules():
    """The rules look the model's structure up once per adapter: a second model gets its own hooks, never the
    first one's modules, and leaving removes every hook from both."""
    first, second = relevance_model("llama", seed=0), relevance_model("llama", seed=1)
    adapters = [get_adapter(first), get_adapter(second)]
    with model_lock(first), applied(adapters[0], attnlrp_rules(adapters[0])):
        pass
    for adapter in adapters:
        with model_lock(adapter.model), applied(adapter, attnlrp_rules(adapter)):
            hooked = [m for m in adapter.model.modules() if m._forward_hooks]
            other = adapters[1] if adapter is adapters[0] else adapters[0]
            assert hooked and not [m for m in other.model.modules() if m._forward_hooks]
            q_proj = adapter.attention_qkv(0)[0][0]
            assert len(q_proj._forward_hooks) == 1
    assert not [m for a in adapters for m in a.model.modules() if m._forward_hooks]


def _saved_bytes(adapter, rules) -> int:
    """Bytes of distinct storages autograd holds for the backward at the end of a forward pass under `rules`."""
    import weakref

    from interpscope.relevance.engine import forward_logits

    refs: list = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        refs.append(weakref.ref(tensor))
        return tensor
    with torch.enable_grad(), applied(adapter, rules), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        embeds = adapter.embedding()(tiny_ids(length=12)).detach().requires_grad_(True)
        logits = forward_logits(adapter.model, embeds, [11])
        gc.collect()
        alive = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for r in refs if (t := r()) is not None}
        del logits
    return sum(alive.values())


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_activation_rule_holds_no_more_than_a_plain_pass(family):
    """The rule's factor takes the place of what the nonlinearity's own backward would have kept (its input): the
    module's autograd node, whose backward never runs, must not stay alive beside it (one [T, width] tensor per MLP
    more than a plain gradient pass holds, measured 23 MB at 128 tokens on SmolLM2, before)."""
    model = relevance_model(family)
    adapter = get_adapter(model)
    plain = _saved_bytes(adapter, [])
    assert _saved_bytes(adapter, [ActivationRule(0.5)]) <= plain
    assert _saved_bytes(adapter, attnlrp_rules(adapter)) <= plain
