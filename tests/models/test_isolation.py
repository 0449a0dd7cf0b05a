"""No session can change another's results: one thread edits a shared model while another predicts with it.

Every kind of hook the project puts on a shared model (steering, feature ablation, neuron mean-ablation, Fourier
filters, SAE splices, early-stopped prompt encodes, captures, relevance rules, MambaLRP's forward override) runs in
a loop in one thread; another thread calls `predict_next` on the same model instance, without any lock, and every
prediction must equal the one computed before the editing started. Each case also checks that the edit really
changes that model's output in its own thread, so a case cannot pass by editing nothing.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
import torch

from interpscope.capture import capture, editing, foreign_hooks, hooks, model_lock, run_scope
from interpscope.entropy_neurons.ablation import Neuron, token_effects
from interpscope.predict import predict_next
from interpscope.relevance.api import explain
from interpscope.sae import load_sae
from interpscope.sae.evaluation import evaluate_saes
from interpscope.sae.store.prompt import feature_attribution, prompt_features
from interpscope.sae.store.steering import steer
from tests.sae_store_tiny import HOOK, random_sae_folder, tiny_lm

PROMPT = "The capital of France is"
N_PREDICTIONS = 25


def _top(lm, text: str = PROMPT) -> tuple[list[int], np.ndarray]:
    result = predict_next(lm, text, top=5, fresh=True)
    return [p.id for p in result.predictions], np.array([p.prob for p in result.predictions])


def race(lm, edit_once: Callable[[], None], text: str = PROMPT) -> tuple[int, int, int]:
    """(wrong predictions, predictions, edits completed) while `edit_once` loops in another thread."""
    expected_ids, expected_probs = _top(lm, text)
    stop, started, errors, edits = threading.Event(), threading.Event(), [], [0]

    def editor() -> None:
        try:
            while not stop.is_set():
                edit_once()
                edits[0] += 1
                started.set()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)
        finally:
            started.set()  # an editor that failed wakes the wait below too (its error is reported)

    thread = threading.Thread(target=editor, daemon=True)
    thread.start()
    wrong = 0
    try:
        # edits are running before predictions start; waited for on an event, not a busy loop: a spinning thread holds
        # the GIL, and every torch op of the editor (which releases it) then waits a switch interval to get it back
        # (a tiny model's patching grid took 36 s instead of 0.1 s)
        started.wait(timeout=600)
        for _ in range(N_PREDICTIONS):
            ids, probs = _top(lm, text)
            wrong += ids != expected_ids or not np.allclose(probs, expected_probs, rtol=0, atol=1e-6)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert foreign_hooks(lm.model) == []
    assert not editing(lm.model)
    return wrong, N_PREDICTIONS, edits[0]


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    lm = tiny_lm(seed=5)
    folder = random_sae_folder(lm, tmp_path_factory.mktemp("sae") / "sae", d_sae=48)
    sae = load_sae(folder)
    ids = lm.encode(PROMPT)
    return lm, sae, ids


def _changes_output(lm, ids, name: str, fn) -> bool:
    with torch.no_grad():
        clean = lm.model(input_ids=ids).logits[0, -1]
        with hooks(lm.adapter, {name: fn}):
            edited = lm.model(input_ids=ids).logits[0, -1]
    return not torch.allclose(clean, edited)


def _strong_feature(lm, sae) -> int:
    return int(sae.W_dec.norm(dim=1).argmax())


EDIT_KINDS = ["steer-add", "steer-ablate", "capture-edit", "capture-stop-early", "neuron-mean-ablation",
              "sae-splice", "prompt-features", "feature-attribution", "attnlrp-rules"]


def _edit_for(kind: str, lm, sae, ids) -> Callable[[], None]:
    feature = _strong_feature(lm, sae)
    if kind == "steer-add":
        return lambda: steer(lm, sae, PROMPT, feature, mode="add", strength=300.0, n_new=2)
    if kind == "steer-ablate":
        return lambda: steer(lm, sae, PROMPT, feature, mode="ablate", n_new=2)
    if kind == "capture-edit":
        def once() -> None:
            with torch.no_grad(), hooks(lm.adapter, {"blocks.1.mlp.hook_post": lambda t: t * 0 + 5.0}):
                lm.model(input_ids=ids)
        return once
    if kind == "capture-stop-early":
        return lambda: capture(lm.adapter, ids, ["blocks.0.hook_resid_post"], stop_early=True)
    if kind == "neuron-mean-ablation":
        means = {1: np.full(lm.adapter.d_mlp, 3.0)}
        tokens = ids.repeat(2, 1)
        return lambda: token_effects(lm, [Neuron(1, 3), Neuron(1, 7)], tokens, means, None)
    if kind == "sae-splice":
        windows = ids.repeat(2, 1)
        return lambda: evaluate_saes(lm, [sae], ids=windows)
    if kind == "prompt-features":
        return lambda: prompt_features(lm, sae, PROMPT)
    if kind == "feature-attribution":
        return lambda: feature_attribution(lm, sae, PROMPT, feature, -1, method="attnlrp")
    if kind == "attnlrp-rules":
        return lambda: explain(lm, PROMPT, "attnlrp", latent=True)
    raise ValueError(kind)


@pytest.mark.parametrize("kind", EDIT_KINDS)
def test_a_predicting_thread_never_sees_another_threads_edits(setting, kind):
    lm, sae, ids = setting
    wrong, total, edits = race(lm, _edit_for(kind, lm, sae, ids))
    assert edits >= 1
    assert wrong == 0, f"{wrong} of {total} predictions changed while {kind} ran in another thread"


def test_the_edits_raced_against_do_change_the_model_in_their_own_thread(setting):
    lm, sae, ids = setting
    feature = _strong_feature(lm, sae)
    direction = sae.W_dec[feature].detach()
    assert _changes_output(lm, ids, HOOK, lambda t: t + 300.0 * direction)
    assert _changes_output(lm, ids, "blocks.1.mlp.hook_post", lambda t: t * 0 + 5.0)
    result = steer(lm, sae, PROMPT, feature, mode="add", strength=300.0, n_new=0)
    assert result.kl > 1e-3


def test_fourier_filters_do_not_reach_other_threads():
    from interpscope.fourier.filters import filter_table
    from interpscope.fourier.numbers import number_tokens
    from interpscope.models import load_model

    adder = load_model("adder", device="cpu")
    numbers = number_tokens(adder.tokenizer, 100)
    pairs = np.array([[a, b] for a in range(0, 40, 7) for b in range(0, 40, 9)])
    table = filter_table(adder, numbers, pairs, configs=[("none", "none"), ("low", "both")])
    assert table.rows[1].accuracy < table.rows[0].accuracy  # the filter is effective in its own thread
    wrong, total, edits = race(adder, lambda: filter_table(adder, numbers, pairs[:6], configs=[("low", "both")]),
                               text="12+7=")
    assert edits >= 1 and wrong == 0, f"{wrong} of {total}"


def test_mamba_forward_override_does_not_reach_other_threads():
    from interpscope.models import load_model
    from interpscope.relevance.mamba.rule import mamba_lrp

    mamba = load_model("mamba-tiny", device="cpu")
    ids = mamba.encode("It is a truth universally acknowledged")

    def once() -> None:
        with mamba_lrp(mamba), torch.enable_grad():
            embeds = mamba.adapter.embedding()(ids).detach().requires_grad_(True)
            mamba.model(inputs_embeds=embeds, use_cache=False).logits[0, -1].max().backward()

    wrong, total, edits = race(mamba, once, text="It is a truth universally acknowledged")
    assert edits >= 1 and wrong == 0, f"{wrong} of {total}"


def test_predictions_refuse_to_run_inside_their_own_edit(setting):
    lm, _, _ = setting
    with hooks(lm.adapter, {"blocks.1.mlp.hook_post": lambda t: t * 0}):
        with pytest.raises(RuntimeError, match="activation edit"):
            predict_next(lm, PROMPT)
    with hooks(lm.adapter, {"blocks.1.mlp.hook_post": lambda t: None}, role="read"):
        predict_next(lm, PROMPT)  # reading is fine


def test_run_scope_carries_hooks_into_a_worker_thread_and_nowhere_else(setting):
    import contextvars

    lm, _, ids = setting
    with torch.no_grad():
        clean = lm.model(input_ids=ids).logits[0, -1]
    seen = {}
    with run_scope(), hooks(lm.adapter, {"blocks.1.mlp.hook_post": lambda t: t * 0 + 5.0}):
        context = contextvars.copy_context()

        def in_scope() -> None:
            with torch.no_grad():
                seen["scoped"] = lm.model(input_ids=ids).logits[0, -1]

        def outside() -> None:
            with torch.no_grad():
                seen["outside"] = lm.model(input_ids=ids).logits[0, -1]

        workers = [threading.Thread(target=context.run, args=(in_scope,)), threading.Thread(target=outside)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
    assert not torch.allclose(seen["scoped"], clean)
    assert torch.equal(seen["outside"], clean)


def test_foreign_hooks_names_a_hook_registered_behind_the_api(setting):
    lm, _, _ = setting
    handle = lm.adapter.blocks()[0].register_forward_hook(lambda *args: None)
    try:
        found = foreign_hooks(lm.model)
        assert len(found) == 1 and found[0].startswith("transformer.h.0")
    finally:
        handle.remove()
    assert foreign_hooks(lm.model) == []


def test_the_lock_is_reentrant_and_shared(setting):
    lm, _, _ = setting
    with model_lock(lm), model_lock(lm.model), model_lock(lm.adapter):
        holder = {}
        worker = threading.Thread(target=lambda: holder.setdefault("got", model_lock(lm).acquire(blocking=False)))
        worker.start()
        worker.join()
        assert holder["got"] is False
