"""End to end in a real browser: pick the shipped Mamba LM, see its MambaLRP heatmap and the per-fix chart."""
from __future__ import annotations

import json

import pytest

from tests.ui.conftest import open_from_sidebar, wait_for_app

pytestmark = pytest.mark.browser


def test_mamba_heatmap_in_the_browser(app_server, browser_page, artefacts):
    page = browser_page
    sidebar = open_from_sidebar(page, app_server, "Relevance maps")
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=180_000)
    wait_for_app(page)
    sidebar.locator("[data-testid='stSelectbox']").first.click()
    page.get_by_role("option", name="mamba-tiny", exact=True).click()
    wait_for_app(page)
    page.get_by_role("button", name="Run", exact=True).click()
    try:
        page.get_by_text("MambaLRP: relevance for").first.wait_for(timeout=180_000)
    finally:
        page.screenshot(path=str(artefacts / "mamba-relevance-page-first.png"), full_page=True)
    wait_for_app(page)
    heatmap = page.locator(".relevance-heatmap").first
    heatmap.wait_for(timeout=120_000)
    tokens = heatmap.locator(".relevance-token")
    assert tokens.count() > 5
    heatmap.screenshot(path=str(artefacts / "mamba-heatmap.png"))
    page.get_by_text("Conservation error per disabled fix").first.wait_for(timeout=180_000)
    page.locator(".js-plotly-plot").filter(has_text="Conservation error per disabled fix").screenshot(
        path=str(artefacts / "mamba-fix-errors.png"))
    page.get_by_role("button", name="Compute relevance vs distance").click()
    distance = page.locator(".js-plotly-plot").filter(has_text="relevance vs distance")
    distance.wait_for(timeout=180_000)
    distance.screenshot(path=str(artefacts / "mamba-distance.png"))

    with page.expect_download() as download_info:
        page.get_by_role("button", name="JSON").first.click()
    path = artefacts / "mamba-heatmap.json"
    download_info.value.save_as(path)
    exported = json.loads(path.read_text())
    assert exported["model"] == "mamba-tiny" and exported["method"] == "mambalrp"
    assert len(exported["relevance"]) == len(exported["tokens"]) == tokens.count()
