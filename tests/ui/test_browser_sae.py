"""In a real browser: the SAE overview evaluates the shipped Gated SAE on the bundled SmolLM2 and exports its
density histogram; the SAE training page renders its form. Screenshots go to test-artefacts/."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from tests.ui.conftest import open_from_sidebar, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.bundled]


def test_sae_overview_shipped_gated(app_server, browser_page, artefacts):
    page = browser_page
    open_from_sidebar(page, app_server, "SAE overview")
    page.wait_for_selector("text=SAE overview", timeout=180_000)
    wait_for_app(page)
    page.get_by_role("button", name="Evaluate").wait_for(timeout=180_000)
    page.wait_for_selector("text=gated SAE · 4,608 features on blocks.15.hook_resid_post of smollm2-135m")
    wait_for_app(page)
    tokens = page.get_by_label("Tokens", exact=True).and_(page.get_by_test_id("stNumberInputField"))
    tokens.fill("256")
    tokens.press("Enter")
    wait_for_app(page)
    page.get_by_role("button", name="Evaluate").click()
    page.wait_for_selector(".js-plotly-plot", timeout=300_000)
    wait_for_app(page)
    page.wait_for_selector("text=evaluation tokens", timeout=300_000)  # the evaluation's own sentence
    wait_for_app(page)
    page.screenshot(path=str(artefacts / "sae_overview.png"), full_page=True)
    # the evaluation is the page's last figure and export (the SAEBench section above has its own)
    page.locator(".js-plotly-plot").last.screenshot(path=str(artefacts / "sae_overview-density.png"))
    with page.expect_download() as download_info:
        page.get_by_role("button", name="JSON").last.click()
    path = artefacts / "sae_overview-export.json"
    download_info.value.save_as(path)
    exported = json.loads(path.read_text())
    assert exported["architecture"] == "gated" and exported["d_sae"] == 4608
    assert exported["n_tokens"] == 2 * 127  # two 128-token windows, each without its position-0 sink
    assert exported["schema"] == "interpscope.sae.evaluation"  # the CLI's sae eval --json document
    histogram = exported["log10_density_histogram"]  # per-feature density is the CSV table's
    assert len(histogram["edges"]) == len(histogram["counts"]) + 1 and sum(histogram["counts"]) > 0
    with page.expect_download() as download_info:
        page.get_by_role("button", name="PNG").last.click()
    png = artefacts / "sae_overview-export.png"
    download_info.value.save_as(png)
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width >= 400


def test_sae_training_page_renders(app_server, browser_page, artefacts):
    page = browser_page
    open_from_sidebar(page, app_server, "SAE training")
    page.wait_for_selector("text=SAE training", timeout=180_000)
    wait_for_app(page)
    page.wait_for_selector("text=Start / resume training", timeout=180_000)
    width = page.get_by_label("Width (features)", exact=True).and_(page.get_by_test_id("stNumberInputField"))
    assert width.input_value() == "4608"  # 8 x d_model of the bundled model
    page.screenshot(path=str(artefacts / "sae_training.png"), full_page=True)
