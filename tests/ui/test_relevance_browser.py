"""End to end in a real browser: the Relevance maps page shows a heatmap and exports it as SVG."""
from __future__ import annotations

import pytest

from tests.ui.conftest import open_from_sidebar, wait_for_app

pytestmark = pytest.mark.browser


def test_relevance_heatmap_and_svg_export(app_server, browser_page, artefacts):
    page = browser_page
    open_from_sidebar(page, app_server, "Relevance maps")
    page.wait_for_selector("h1:has-text('Relevance maps')", timeout=180_000)
    box = page.get_by_role("textbox", name="Text to explain")
    box.fill("Elizabeth was delighted to see her sister walk into the")
    box.press("Control+Enter")
    wait_for_app(page)
    assert page.locator(".relevance-heatmap").count() == 0  # nothing is computed before Run
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("span[title*=\"' sister': R = \"]", timeout=180_000)  # the new text's map
    wait_for_app(page)
    tokens = page.locator("span[title*='R = ']")
    assert tokens.count() >= 10
    title = tokens.first.get_attribute("title")
    assert title.startswith("token 0") and "R = " in title
    backgrounds = {tokens.nth(i).evaluate("e => getComputedStyle(e).backgroundColor") for i in range(tokens.count())}
    assert len(backgrounds) > 3  # coloured by relevance, not one flat colour
    page.get_by_text("relative error").first.wait_for()  # the conservation readout's sentence
    assert "run=1" in page.url and "sister" in page.url  # the inputs and the Run live in the URL
    page.screenshot(path=str(artefacts / "relevance.png"), full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("button", name="SVG").first.click()
    svg_path = artefacts / "relevance-heatmap.svg"
    download_info.value.save_as(svg_path)
    svg = svg_path.read_text(encoding="utf-8")
    assert "<svg" in svg[:500] and "AttnLRP" in svg and "relevance R" in svg
    assert "Not used for the colour scale: position 0" in svg and "prepended BOS" in svg  # named where shown
    assert svg_path.stat().st_size > 5_000
