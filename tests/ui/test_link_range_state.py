"""A link's number outside an input's range (issue 45, item 5): the page says what was asked, the range, and the
value it uses instead, and runs with that value; before, such a value was listed among "parameters this page cannot
use" and replaced by the default without saying which (a steering link with strength=1e309 then steered at the
feature's default strength), or, inside the parameter's range but outside its widget's, broke the page."""
from __future__ import annotations

import math

import pytest
from streamlit.testing.v1 import AppTest

from pages._common import Param
from tests.apptest_util import APP, ROOT
from tests.ui.test_sae_browser_page import PAGE as SAE_PAGE
from tests.ui.test_sae_browser_page import env  # noqa: F401  (the module's fixture: a tiny store)


def open_link(page: str, params: dict[str, str], **state) -> AppTest:
    """The app opened at a link to `page` (the sidebar first, as a browser does)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in state.items():
        at.session_state[key] = value
    at.query_params.update(params)
    at.switch_page(str(ROOT / page))
    at.run()
    assert not at.exception, at.exception
    return at


def warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


def ignored(at: AppTest) -> str:
    return " ".join(w for w in warnings(at) if w.startswith("Ignored link parameter(s)"))


def test_a_parameter_knows_its_range_and_brings_a_number_into_it():
    top = Param("k-top", "top", 20, int, low=5, high=50)
    assert top.parse("999") == 999 and top.in_range(999) == 50 and top.in_range(-3) == 5 and top.in_range(7) == 7
    assert top.parse("1e3") is None and top.range_text() == "5 to 50"
    strength = Param("k-s", "strength", None, float, low=-1e6, high=1e6)
    assert strength.parse("1e309") == math.inf and strength.in_range(math.inf) == 1e6
    assert strength.in_range(strength.parse("-1e309")) == -1e6
    assert strength.parse("nan") is None  # not a number at all: ignored, and said
    unbounded = Param("k-u", "u", 1.0, float, low=0.0)
    assert unbounded.parse("inf") is None and unbounded.parse("-inf") == -math.inf  # no bound can stand for +inf
    assert unbounded.range_text() == "at least 0"


def test_the_sae_browser_names_each_out_of_range_value_and_uses_the_nearest(env):  # noqa: F811
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / SAE_PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": "Prompt", "feature": "-1", "top": "999"})
    at.run()
    assert not at.exception, at.exception
    notes = warnings(at)
    assert "The link asks for feature=-1, outside its range (at least 0): using 0 instead." in notes, notes
    assert "The link asks for top=999, outside its range (5 to 50): using 50 instead." in notes, notes
    assert not ignored(at)  # neither is called a parameter the page cannot use
    assert at.session_state["sae_feature"] == 0 and at.slider(key="sae-prompt-top").value == 50


def test_a_steering_link_with_an_infinite_strength_says_so_and_steers_at_the_bound(env):  # noqa: F811
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / SAE_PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": "Steering", "feature": "3", "text": "The cat sat on the mat",
                            "strength": "1e309", "new": "2", "run": "1"})
    at.run()
    assert not at.exception, at.exception
    notes = warnings(at)
    assert ("The link asks for strength=1e309, outside its range (-1,000,000 to 1,000,000): using 1,000,000 "
            "instead.") in notes
    assert not ignored(at)
    assert at.number_input(key="sae-steer-strength").value == 1e6
    # the run the link asked for ran at that strength, not at the feature's default one
    assert any(m.value == "**Feature 3 + 1e+06 × direction**" for m in at.markdown), [m.value for m in at.markdown]


@pytest.mark.bundled
@pytest.mark.parametrize("asked", ["5", "0.8"])
def test_a_flow_threshold_past_the_slider_is_named_and_the_page_still_opens(bundled_lm, asked):
    """0.8 was inside the parameter's range (0 to 1) but past the slider's (0 to 0.5): the page broke."""
    at = open_link("pages/flow.py", {"threshold": asked})
    assert f"The link asks for threshold={asked}, outside its range (0 to 0.5): using 0.5 instead." in warnings(at)
    assert at.slider(key="flow-threshold").value == 0.5 and not ignored(at)


@pytest.mark.bundled
def test_a_graph_threshold_out_of_range_is_named(bundled_lm):
    at = open_link("pages/graphs.py", {"threshold": "5"})
    assert "The link asks for threshold=5, outside its range (-1 to 1): using 1 instead." in warnings(at)
    assert at.session_state["graph-threshold"] == 1.0 and not ignored(at)


@pytest.mark.bundled
def test_a_layer_the_model_lacks_is_named(bundled_lm):
    at = open_link("pages/entropy_neurons.py", {"layer": "999"})
    last = bundled_lm.adapter.n_layers - 1
    assert at.number_input(key="en-layer").value == last
    assert f"The link asks for layer=999, outside its range (0 to {last:,}): using {last:,} instead." in warnings(at)
    assert not ignored(at)


@pytest.mark.bundled
def test_a_held_out_count_past_the_set_is_named_and_the_page_still_opens(bundled_lm):
    """fn=500 was inside the parameter's range (1 to 1000) but past the shipped set's 218 prompts: the page broke."""
    from interpscope.relevance.heldout import load_set

    n = len(load_set("heldout"))
    at = open_link("pages/relevance.py", {"fsource": "heldout", "fn": "500"})
    assert at.number_input(key="relevance-file-set-n").value == n
    assert any(w.startswith("The link asks for prompt count 500, which is not here") and f"showing {n}." in w
               for w in warnings(at)), warnings(at)
