"""End to end in a real browser: type a prompt, see the chart, download PNG and JSON exports."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from tests.ui.conftest import start_app, stop_app, wait_for_app

pytestmark = pytest.mark.browser


def test_home_prediction_and_exports(app_server, browser_page, artefacts):
    page = browser_page
    page.goto(app_server)
    page.wait_for_selector("text=Next token", timeout=180_000)
    box = page.get_by_role("textbox", name="Text")
    box.fill("The capital of France is")
    box.press("Control+Enter")
    wait_for_app(page)
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    page.wait_for_selector("text=Paris")
    page.screenshot(path=str(artefacts / "home.png"), full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("button", name="PNG").first.click()
    png_path = artefacts / "home-export.png"
    download_info.value.save_as(png_path)
    with Image.open(png_path) as image:
        image.verify()
    with Image.open(png_path) as image:
        assert image.format == "PNG"
        assert image.width >= 400 and image.height >= 200
    assert png_path.stat().st_size > 5_000

    with page.expect_download() as download_info:
        page.get_by_role("button", name="JSON").first.click()
    json_path = artefacts / "home-export.json"
    download_info.value.save_as(json_path)
    exported = json.loads(json_path.read_text())
    assert exported["model"] == "smollm2-135m"
    assert exported["predictions"][0]["token"] == " Paris"
    probs = [p["prob"] for p in exported["predictions"]]
    assert probs == sorted(probs, reverse=True)


def test_a_page_link_opened_first_keeps_the_app_around_it(browser_page, artefacts):
    """A shared link to a page, as the very first request to a fresh server, still runs app.py: the sidebar
    shows the navigation titles and the model picker (not Streamlit's file-name list of pages/)."""
    process, url = start_app(artefacts / "streamlit-first-link.log")
    try:
        page = browser_page
        page.goto(url + "/neurons")
        sidebar = page.locator("[data-testid='stSidebar']")
        sidebar.get_by_text("Device").wait_for(timeout=120_000)
        page.get_by_role("heading", name="Entropy neurons").first.wait_for(timeout=120_000)
        for title in ("Home", "Relevance maps", "Entropy neurons", "Fourier features"):
            assert sidebar.get_by_role("link", name=title).count() == 1, title
        assert sidebar.get_by_text("common", exact=True).count() == 0
        assert page.get_by_text("Page not found").count() == 0
        page.screenshot(path=str(artefacts / "first-link.png"))
    finally:
        stop_app(process)
