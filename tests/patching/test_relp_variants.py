"""AtP / RelP coefficients taken on the path from the corrupt to the clean prompt (interpscope.patching.attribution
PATHS and the 'relp-half-q-ig2' option), on a tiny random Llama in float64.

- the corrupt point is the estimate of before, bit for bit, and a plain rule set still means the corrupt run;
- the clean point is the estimate with the coefficients of the clean run (endpoints are exact, no rounding);
- a path of several points, run as one batched pass, is the average of its points run one at a time;
- the option offered by the CLI and the page (and their default) is its rule set on its path; patch() runs it.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.capture import model_lock
from interpscope.patching.attribution import (
    PATHS,
    RELP_PATH_OPTIONS,
    RELP_RULES,
    _gradients,
    _products,
    approximate_grids,
    midpoints,
)
from interpscope.patching.run import patch, prepare
from interpscope.relevance.rules import apply_rules
from tests.flow.test_flow import tiny
from tests.tiny import tiny_llama

CLEAN = "The quick brown fox jumps"
CORRUPT = "The quick brown cat jumps"
TOKENS = dict(answer="#97", wrong="#98")
KINDS = ["resid", "attn", "mlp", "heads"]


@pytest.fixture(scope="module")
def lm():
    return tiny(tiny_llama)


@pytest.fixture(scope="module")
def ready(lm):
    with model_lock(lm):
        return prepare(lm, CLEAN, CORRUPT, "logit-diff", TOKENS["answer"], TOKENS["wrong"], None)


def _estimate(lm, ready, method: str, path: str | None = None, rules: str = "relp-half-q",
              corrupt_ids: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    ids = ready.pair.corrupt_ids if corrupt_ids is None else corrupt_ids
    with model_lock(lm):
        return approximate_grids(lm.model, lm.adapter, ids, ready.metric, ready.clean, ready.corrupt, KINDS, method,
                                 rules, ready.pair.clean_ids, path)


def _by_hand(lm, ready, method: str, alphas: tuple[float, ...]) -> dict[str, np.ndarray]:
    """The average of one single-point pass per alpha, each its own estimate, averaged grid by grid."""
    grids = []
    for alpha in alphas:
        with model_lock(lm):
            if method == "atp":
                grads = _gradients(lm.adapter, ready.pair.corrupt_ids, ready.metric, True, ready.pair.clean_ids,
                                   (alpha,))
            else:
                with apply_rules(lm.model, RELP_RULES["relp-half-q"]) as ruled:
                    grads = _gradients(ruled, ready.pair.corrupt_ids, ready.metric, True, ready.pair.clean_ids,
                                       (alpha,))
        grids.append(_products(lm.adapter, ready.clean, ready.corrupt, grads, KINDS))
    return {kind: np.mean([g[kind] for g in grids], axis=0) for kind in KINDS}


@pytest.mark.parametrize("method", ["atp", "relp"])
def test_the_corrupt_point_is_the_estimate_of_before_and_a_plain_rule_sets_own(lm, ready, method):
    default = _estimate(lm, ready, method)
    corrupt = _estimate(lm, ready, method, "corrupt")
    with model_lock(lm):  # no clean ids at all: the papers' one pass on the corrupt prompt
        alone = approximate_grids(lm.model, lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean,
                                  ready.corrupt, KINDS, method, "relp-half-q")
    for kind in KINDS:
        assert np.abs(alone[kind]).max() > 0
        np.testing.assert_array_equal(default[kind], alone[kind])
        np.testing.assert_array_equal(corrupt[kind], alone[kind])


@pytest.mark.parametrize("method", ["atp", "relp"])
def test_the_clean_point_takes_the_coefficients_of_the_clean_run(lm, ready, method):
    """Interpolating the embeddings is exact at alpha = 1: the clean point is the corrupt-point estimate with the
    clean prompt's coefficients (the products still use clean - corrupt), and differs from the corrupt point."""
    clean = _estimate(lm, ready, method, "clean")
    swapped = _estimate(lm, ready, method, corrupt_ids=ready.pair.clean_ids)
    corrupt = _estimate(lm, ready, method, "corrupt")
    for kind in KINDS:
        np.testing.assert_array_equal(clean[kind], swapped[kind])
    assert max(np.abs(clean[k] - corrupt[k]).max() for k in KINDS) > 1e-3 * np.abs(corrupt["resid"]).max()


@pytest.mark.parametrize("method, path", [("atp", "ends"), ("relp", "ends"), ("relp", "ig2"), ("atp", "ig3")])
def test_a_batched_path_is_the_average_of_its_points_one_at_a_time(lm, ready, method, path):
    batched = _estimate(lm, ready, method, path)
    by_hand = _by_hand(lm, ready, method, PATHS[path])
    for kind in KINDS:
        np.testing.assert_allclose(batched[kind], by_hand[kind], rtol=1e-9, atol=1e-12 * np.abs(by_hand[kind]).max())
    single = _estimate(lm, ready, method, "corrupt")
    assert max(np.abs(batched[k] - single[k]).max() for k in KINDS) > 1e-3 * np.abs(single["resid"]).max()


def test_midpoints_are_the_midpoint_rule():
    assert midpoints(1) == (0.5,)
    assert midpoints(2) == (0.25, 0.75)
    assert PATHS["ig4"] == (0.125, 0.375, 0.625, 0.875)
    assert PATHS["ends"] == (0.0, 1.0)


def test_the_path_option_is_its_rule_set_on_its_path_and_patch_runs_it(lm, ready):
    name = "relp-half-q-ig2"
    assert RELP_PATH_OPTIONS[name] == ("relp-half-q", "ig2") and name in RELP_RULES
    option = _estimate(lm, ready, "relp", rules=name)
    spelled = _estimate(lm, ready, "relp", "ig2", rules="relp-half-q")
    result = patch(lm, CLEAN, CORRUPT, **TOKENS, methods="relp", relp_rules=name)
    assert result.relp_rules == name
    for kind in KINDS:
        np.testing.assert_array_equal(option[kind], spelled[kind])
        np.testing.assert_allclose(np.asarray(result.grids[kind]["relp"]), option[kind] / ready.span, rtol=1e-12,
                                   atol=1e-15)


def test_a_path_needs_the_clean_prompt_and_a_known_name(lm, ready):
    with model_lock(lm), pytest.raises(ValueError, match="clean prompt"):
        approximate_grids(lm.model, lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean, ready.corrupt,
                          ["resid"], "relp", "relp-half-q-ig2")
    with model_lock(lm), pytest.raises(ValueError, match="unknown path"):
        approximate_grids(lm.model, lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean, ready.corrupt,
                          ["resid"], "atp", clean_ids=ready.pair.clean_ids, path="ig9")
