"""In a real browser: overview -> feature page -> prompt view -> click a feature -> its page, then download its JSON.

Runs its own `streamlit run app.py` with a temporary data directory holding one store (tiny GPT-2 saved as a model
folder, random SAE), so the flow does not depend on which stores are shipped.
"""
from __future__ import annotations

import json
import os
import re

import pytest

from interpscope.models import load_model
from interpscope.sae.store import FeatureStore, build_store
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm
from tests.ui.conftest import open_from_sidebar, start_app, stop_app, wait_for_app

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def store_app(tmp_path_factory, artefacts):
    """(URL of a running app whose data directory holds one tiny store, that store)."""
    root = tmp_path_factory.mktemp("browser-store")
    data = root / "data"
    # The sidebar's default is the bundled model: link this data directory to its converted copy in the session's
    # own data directory (converted there once), or the app converts the GGUF again (~15 s) during the flow.
    from interpscope.models import smollm2

    (data / "models").mkdir(parents=True)
    (data / "models" / smollm2.CACHE_NAME).symlink_to(smollm2.convert(), target_is_directory=True)
    old = os.environ.get("INTERPSCOPE_DATA_DIR")
    os.environ["INTERPSCOPE_DATA_DIR"] = str(data)
    try:
        lm = load_model(str(save_tiny_lm(root / "tiny-model")), device="cpu")
        store = FeatureStore(build_store(lm, random_sae_folder(lm, root / "sae"), n_tokens=2048, context_size=64,
                                         batch_size=4))
    finally:
        if old is None:
            os.environ.pop("INTERPSCOPE_DATA_DIR")
        else:
            os.environ["INTERPSCOPE_DATA_DIR"] = old
    env = dict(os.environ, INTERPSCOPE_DATA_DIR=str(data), OMP_NUM_THREADS="1")
    process, url = start_app(artefacts / "sae-browser-server.log", env=env)
    yield url, store
    stop_app(process)


def feature_in_url(page) -> int:
    match = re.search(r"[?&]feature=(\d+)", page.url)
    assert match, page.url
    return int(match.group(1))


def test_overview_feature_prompt_click_and_json(store_app, browser_page, artefacts):
    try:
        _flow(store_app, browser_page, artefacts)
    except Exception:
        browser_page.screenshot(path=str(artefacts / "sae-browser-failure.png"), full_page=True)
        raise


def _flow(store_app, page, artefacts) -> None:
    url, store = store_app
    open_from_sidebar(page, url, "SAE feature browser")
    page.get_by_text("Feature density").first.wait_for(timeout=180_000)
    wait_for_app(page)
    if f"store={store.name}" not in page.url:  # shipped stores are listed first
        page.get_by_text("Show the stores of every model").click()  # the tiny model's store is not the sidebar's
        wait_for_app(page)
        page.locator("[data-testid='stSelectbox']").filter(has_text="Feature store").click()
        page.get_by_role("option", name=store.name).click()
        page.wait_for_function(f"() => window.location.search.includes('store={store.name}')", timeout=60_000)
        wait_for_app(page)
    page.screenshot(path=str(artefacts / "sae-browser-overview.png"), full_page=True)

    page.get_by_role("radiogroup", name="View").get_by_role("radio", name="Feature", exact=True).click()
    page.get_by_text("Top activating contexts").wait_for(timeout=120_000)
    page.get_by_role("button", name="Next ▶").click()
    page.wait_for_function("() => /feature=1(&|$)/.test(window.location.search)", timeout=60_000)
    wait_for_app(page)
    page.screenshot(path=str(artefacts / "sae-browser-feature.png"), full_page=True)

    page.get_by_role("radiogroup", name="View").get_by_role("radio", name="Prompt", exact=True).click()
    run = page.locator(".st-key-sae-prompt-run button")  # the Prompt view runs the model on Run only (45.12)
    run.wait_for(timeout=120_000)
    wait_for_app(page)
    run.click()
    page.get_by_text("Features active at a token").wait_for(timeout=300_000)
    wait_for_app(page)
    page.screenshot(path=str(artefacts / "sae-browser-prompt.png"), full_page=True)
    page.get_by_role("radiogroup", name="Click a token").get_by_role("radio", name="truth", exact=True).click()
    wait_for_app(page)
    # the buttons below are those of the token the caption names: wait for the list of 'truth', not the one drawn
    # for the last token before the click took effect (reading the old list's first button and clicking the new
    # one's was the flake: feature 36 read, feature 46 opened, and the URL rightly said 46)
    page.get_by_text(re.compile(r"features active at \d+: ' ?truth'")).first.wait_for(timeout=120_000)
    wait_for_app(page)
    feature_button = page.get_by_role("button", name=re.compile(r"^#\d+ · ")).first
    feature_button.wait_for(timeout=60_000)
    clicked = int(re.match(r"#(\d+)", feature_button.inner_text()).group(1))
    feature_button.click()
    page.get_by_text("Top activating contexts").wait_for(timeout=120_000)
    try:
        page.wait_for_function(f"() => /feature={clicked}(&|$)/.test(window.location.search)", timeout=180_000)
    except Exception as err:  # say what the address bar held instead of a bare timeout
        raise AssertionError(f"feature {clicked} clicked but the address bar stayed at {page.url!r}") from err
    wait_for_app(page)
    assert feature_in_url(page) == clicked
    card = store.card(clicked)
    page.get_by_text(f"{card.max_activation:.4g}", exact=True).first.wait_for(timeout=30_000)
    page.screenshot(path=str(artefacts / "sae-browser-clicked-feature.png"), full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("button", name="JSON").first.click()
    path = artefacts / "sae-browser-feature.json"
    download_info.value.save_as(path)
    exported = json.loads(path.read_text())
    assert exported["id"] == clicked
    assert exported["max_activation"] == pytest.approx(card.max_activation)
    assert len(exported["top_contexts"]) == len(card.top_contexts)
    assert {"tokens", "activations", "max"} <= set(exported["top_contexts"][0])
    assert exported["neighbours"] == [{"feature": n.feature, "cosine": n.cosine} for n in card.neighbours]
