"""A relevance map costs one forward pass: the predicted target and the top-10 list come from the attribution's
own pass, or from the logits a prediction of the same text left in the per-process cache; and either way the
numbers equal the separate passes they replace. (The maps here explain the text as typed, prepend_bos=False, so
their ids are the prediction's: a prepended BOS makes another input.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import on_input
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.predict import predict_next
from interpscope.relevance.api import explain
from interpscope.relevance.engine import forward_logits
from interpscope.relevance.targets import resolve_target
from tests.tiny import loaded as wrap_loaded
from tests.tiny import tiny_llama

TEXT = "It is a truth universally acknowledged, that a single man"


@pytest.fixture
def lm():
    return wrap_loaded(tiny_llama(vocab=50257, seed=4), gpt2_tokenizer(), name="tiny-llama-one-pass")


class Passes:
    """Counts forward passes of the whole model (this run only)."""

    def __init__(self, lm):
        self.count = 0
        self.handle = on_input(lm.model, self._seen)

    def _seen(self, module, args, kwargs):
        self.count += 1

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


def _plain_target(lm):
    ids = lm.encode(TEXT)
    with torch.no_grad():
        row = forward_logits(lm.model, lm.adapter.embedding()(ids), [ids.shape[1] - 1])[0, 0]
    return resolve_target(lm.tokenizer, row, ids.shape[1] - 1), row


@pytest.mark.parametrize("method", ["attnlrp", "cplrp", "gradxinput"])
def test_explain_runs_one_pass_and_reuses_it_for_the_prediction(lm, method):
    passes = Passes(lm)
    result = explain(lm, TEXT, method, prepend_bos=False)
    assert passes.take() == 1
    target, row = _plain_target(lm)
    passes.take()
    assert result.target == target
    probs = torch.softmax(row.float(), -1)
    assert [p.id for p in result.top] == probs.topk(10).indices.tolist()
    np.testing.assert_allclose([p.prob for p in result.top], probs.topk(10).values.numpy(), rtol=1e-6)
    prediction = predict_next(lm, TEXT, top=10, prepend_bos=False)  # the map's own tokens
    assert passes.take() == 0, "the prediction after a map must come from the map's pass"
    assert [p.id for p in prediction.predictions] == [p.id for p in result.top]
    again = explain(lm, TEXT, method, token=" the", prepend_bos=False)
    assert passes.take() == 1 and again.target.token == " the"
    passes.handle.remove()


def test_prediction_first_then_map_is_two_passes_with_the_same_map(lm):
    passes = Passes(lm)
    predict_next(lm, TEXT, top=10, prepend_bos=False)
    first = explain(lm, TEXT, "attnlrp", prepend_bos=False)
    assert passes.take() == 2
    fresh = wrap_loaded(tiny_llama(vocab=50257, seed=4), gpt2_tokenizer(), name="tiny-llama-one-pass-2")
    alone = explain(fresh, TEXT, "attnlrp", prepend_bos=False)
    np.testing.assert_array_equal(first.relevance, alone.relevance)
    assert first.target == alone.target and first.logit == alone.logit
    passes.handle.remove()


def test_a_weight_change_retires_cached_logits(lm):
    first = predict_next(lm, TEXT, top=3)
    with torch.no_grad():
        lm.adapter.unembedding().weight[first.predictions[0].id] -= 100.0
    second = predict_next(lm, TEXT, top=3)
    assert second.predictions[0].id != first.predictions[0].id
