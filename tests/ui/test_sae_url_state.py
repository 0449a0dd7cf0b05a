"""The SAE feature browser keeps what the visitor chose across its views (issue 45, items 2 and 13): the feature a
link opens stays the feature, in the box and in the URL, after Prompt, Steering and Overview; the live views' boxes
start at it; a search query and its kind are in the URL and come back from it."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.apptest_util import ROOT
from tests.ui.test_sae_browser_page import PAGE, env  # noqa: F401  (the module's fixture: a tiny store)


def open_link(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params.update(params)
    at.run()
    assert not at.exception, at.exception
    return at


def view(at: AppTest, name: str) -> AppTest:
    """Click a view of the page's View control, as a visitor does."""
    at.segmented_control(key="sae_view").set_value(name).run()
    assert not at.exception, at.exception
    return at


def test_a_linked_feature_survives_prompt_then_steering_and_stays_in_the_url(env):  # noqa: F811
    store, _, _ = env
    at = open_link({"store": store.name, "feature": "7"})
    assert at.session_state["sae_view"] == "Feature" and at.number_input(key="sae_feature").value == 7
    view(at, "Prompt")
    assert at.query_params["feature"] == "7"
    view(at, "Steering")
    assert at.query_params["feature"] == "7", dict(at.query_params)
    assert at.number_input(key="sae-steer-feature").value == 7  # the feature a steering Run would steer
    view(at, "Feature")
    assert at.number_input(key="sae_feature").value == 7 and at.query_params["feature"] == "7"
    # the feature page's link says where the visitor is; the live views' boxes (kept for them) are not in it
    assert set(at.query_params) <= {"store", "view", "feature", "all_models", "model", "device", "dtype"}, \
        dict(at.query_params)


def test_feature_overview_feature_comes_back_to_the_same_feature(env):  # noqa: F811
    store, _, _ = env
    at = open_link({"store": store.name, "view": "Feature", "feature": "11"})
    at.button(key="sae-next").click().run()
    assert at.number_input(key="sae_feature").value == 12
    view(at, "Overview")
    assert at.query_params["feature"] == "12"
    view(at, "Feature")
    assert at.number_input(key="sae_feature").value == 12 and at.query_params["feature"] == "12"


def test_the_live_views_follow_the_browsers_feature_and_keep_their_own_choice(env):  # noqa: F811
    store, _, _ = env
    at = open_link({"store": store.name, "view": "Feature", "feature": "3"})
    view(at, "Steering")
    assert at.number_input(key="sae-steer-feature").value == 3
    at.number_input(key="sae-steer-feature").set_value(9).run()  # a feature of its own for steering
    view(at, "Prompt")
    view(at, "Steering")
    assert at.number_input(key="sae-steer-feature").value == 9  # kept across the views
    view(at, "Feature")
    at.number_input(key="sae_feature").set_value(20).run()  # another feature opened in the browser
    view(at, "Steering")
    assert at.number_input(key="sae-steer-feature").value == 20  # the steering box follows it


def test_a_search_is_in_the_url_and_a_link_brings_it_back(env):  # noqa: F811
    store, _, _ = env
    at = open_link({"store": store.name})
    at.radio(key="sae_search_kind").set_value("Feature id").run()
    at.text_input(key="sae_search_query").input("#5").run()
    assert at.query_params["search"] == "#5" and at.query_params["search_by"] == "Feature id"
    link = dict(at.query_params)
    again = open_link(link)  # the link, opened in a new session
    assert again.text_input(key="sae_search_query").value == "#5"
    assert again.radio(key="sae_search_kind").value == "Feature id"
    assert list(again.dataframe[0].value["feature"]) == [5]  # the search's result, not only its box
    view(again, "Feature")
    view(again, "Overview")  # and it survives a visit to another view
    assert again.text_input(key="sae_search_query").value == "#5" and again.query_params["search"] == "#5"
