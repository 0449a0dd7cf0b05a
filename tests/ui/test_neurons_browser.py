"""The Entropy neurons page in a real browser on the bundled model: the candidates scatter renders with its
colour bar and log axis, and its PNG and JSON exports download."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from tests.ui.conftest import wait_for_app

pytestmark = pytest.mark.browser


def test_candidates_scatter_and_export(app_server, browser_page, artefacts):
    page = browser_page
    page.goto(app_server + "/neurons")
    page.wait_for_selector("text=Entropy neurons", timeout=180_000)
    wait_for_app(page)
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=180_000)
    assert "Layer 29 neurons" in plot.inner_text()
    assert plot.locator(".colorbar").count() == 1
    assert plot.locator(".point").count() >= 1 or plot.locator("canvas").count() >= 1  # WebGL scatter
    page.screenshot(path=str(artefacts / "entropy-neurons.png"), full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("button", name="PNG").first.click()
    png_path = artefacts / "entropy-candidates-export.png"
    download_info.value.save_as(png_path)
    with Image.open(png_path) as image:
        assert image.format == "PNG" and image.width >= 600 and image.height >= 400

    with page.expect_download() as download_info:
        page.get_by_role("button", name="JSON").first.click()
    json_path = artefacts / "entropy-candidates-export.json"
    download_info.value.save_as(json_path)
    document = json.loads(json_path.read_text())
    assert document["schema"] == "interpscope.neurons.candidates"  # the CLI's `neurons --json` document
    rows = document["neurons"]
    assert len(rows) == 1536 and {"layer", "index", "norm", "logit_var", "rho", "unigram_cosine"} <= set(rows[0])
    rhos = [r["rho"] for r in rows]
    assert rhos == sorted(rhos, reverse=True)
