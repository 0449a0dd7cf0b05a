"""Rules are instance-local context managers: forward values unchanged, fully undone on exit (also after an
exception), never touching another instance or the classes, and serialised per model across threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.capture import model_lock
from interpscope.relevance import apply_rules, attnlrp_rules, cplrp_rules
from interpscope.relevance.api import run_method
from interpscope.relevance.targets import Target
from tests.tiny import relevance_model, tiny_ids

FAMILIES = ["llama", "gpt2", "gpt_neox", "qwen2", "gemma3", "olmo"]
WITH_BIASES = {"gpt2", "gpt_neox", "qwen2"}


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def logits_and_grad(model, ids):
    embeds = get_adapter(model).embedding()(ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds).logits
    (grad,) = torch.autograd.grad(logits[0, -1].max(), [embeds])
    return logits.detach(), grad


@pytest.mark.parametrize("rules", [attnlrp_rules, cplrp_rules], ids=["attnlrp", "cplrp"])
@pytest.mark.parametrize("family", FAMILIES)
def test_rules_keep_forward_and_are_undone(family, rules):
    model = relevance_model(family)
    other = relevance_model(family)  # a second instance of the same class must not be affected
    ids = tiny_ids()
    before_logits, before_grad = logits_and_grad(model, ids)
    other_logits, other_grad = logits_and_grad(other, ids)
    hooks_before = hook_count(model)
    with apply_rules(model, rules):
        inside_logits, inside_grad = logits_and_grad(model, ids)
        still_other = logits_and_grad(other, ids)
        assert hook_count(model) > hooks_before
    # forward values unchanged by the rules (HF's RMSNorms and OLMo's LayerNorm compute in float32: their rounding
    # is the only difference in these float64 models)
    tolerance = 1e-12 if family in ("gpt2", "gpt_neox") else 1e-6
    np.testing.assert_allclose(inside_logits.numpy(), before_logits.numpy(), rtol=tolerance, atol=tolerance)
    assert not torch.allclose(inside_grad, before_grad)  # ... but the backward changed
    assert torch.equal(still_other[0], other_logits) and torch.equal(still_other[1], other_grad)
    after_logits, after_grad = logits_and_grad(model, ids)
    assert hook_count(model) == hooks_before
    assert torch.equal(after_logits, before_logits) and torch.equal(after_grad, before_grad)


@pytest.mark.parametrize("family", FAMILIES)
def test_rules_are_undone_after_an_exception(family):
    model = relevance_model(family)
    ids = tiny_ids()
    before_logits, before_grad = logits_and_grad(model, ids)
    hooks_before = hook_count(model)
    with pytest.raises(RuntimeError, match="boom"):
        with apply_rules(model, attnlrp_rules):
            logits_and_grad(model, ids)
            raise RuntimeError("boom")
    assert hook_count(model) == hooks_before
    after_logits, after_grad = logits_and_grad(model, ids)
    assert torch.equal(after_logits, before_logits) and torch.equal(after_grad, before_grad)
    assert model_lock(model).acquire(blocking=False)  # the lock was released too
    model_lock(model).release()


def test_lock_is_shared_between_loaded_model_and_bare_model():
    class Loaded:  # the shape of interpscope.models.LoadedModel: it holds the model
        def __init__(self, model):
            self.model = model

    model = relevance_model("llama", seed=7)
    loaded = Loaded(model)
    assert model_lock(loaded) is model_lock(Loaded(model))
    assert model_lock(model) is model_lock(loaded)
    assert model_lock(get_adapter(model)) is model_lock(loaded)
    assert model_lock(relevance_model("llama", seed=7)) is not model_lock(loaded)


def test_two_threads_match_sequential_results():
    model = relevance_model("llama", seed=11)
    texts = [tiny_ids(length=12, seed=21), tiny_ids(length=9, seed=22)]
    jobs = [(texts[0], "attnlrp"), (texts[1], "cplrp"), (texts[0], "gradxinput"), (texts[1], "attnlrp")]

    def target_for(ids):
        with torch.no_grad():
            return Target(ids.shape[1] - 1, int(model(input_ids=ids).logits[0, -1].argmax()))

    sequential = [run_method(model, ids, method, target_for(ids))[0].relevance for ids, method in jobs]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def work(index: int) -> None:
        try:
            ids, method = jobs[index]
            start.wait()
            for _ in range(5):
                results[index] = run_method(model, ids, method, target_for(ids))[0].relevance
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    for index, expected in enumerate(sequential):
        np.testing.assert_array_equal(results[index], expected)
    assert hook_count(model) == 0


def test_rules_do_not_reach_other_threads_plain_passes():
    model = relevance_model("gpt2", seed=12)
    ids = tiny_ids(seed=13)
    plain_logits, plain_grad = logits_and_grad(model, ids)
    seen: dict[str, torch.Tensor] = {}
    with apply_rules(model, attnlrp_rules):
        worker = threading.Thread(
            target=lambda: seen.update(zip(("logits", "grad"), logits_and_grad(model, ids), strict=True)))
        worker.start()
        worker.join(timeout=60)
        _, ruled_grad = logits_and_grad(model, ids)
    assert torch.equal(seen["logits"], plain_logits) and torch.equal(seen["grad"], plain_grad)
    assert not torch.allclose(ruled_grad, plain_grad)
