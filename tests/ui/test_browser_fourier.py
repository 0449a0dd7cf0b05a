"""End to end in a real browser: pick the adder, run the filter table, export it as CSV and the chart as PNG."""
from __future__ import annotations

import csv
import io
import re

import pytest
from PIL import Image

from tests.ui.conftest import choose_view, open_from_sidebar, wait_for_app

pytestmark = pytest.mark.browser


def test_filter_table_runs_and_exports(app_server, browser_page, artefacts):
    page = browser_page
    sidebar = open_from_sidebar(page, app_server, "Fourier features")
    page.get_by_role("radiogroup", name="View").get_by_role("radio", name="Filters").wait_for(timeout=180_000)
    sidebar.locator("[data-testid='stSelectbox']").first.click()
    page.get_by_role("option", name="adder", exact=True).click()
    page.get_by_text("Fourier magnitude of the number-token embeddings").wait_for(timeout=180_000)
    wait_for_app(page)
    page.locator(".js-plotly-plot").first.screenshot(path=str(artefacts / "fourier-spectrum.png"))

    choose_view(page, "Filters")
    panel = page.locator("[data-testid='stMain']")
    panel.get_by_role("button", name="Run filter table").click()
    wait_for_app(page)
    panel.get_by_text(re.compile(r"^Filter table \(\d+ prompts")).wait_for(timeout=180_000)
    panel.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    for index, name in enumerate(("fourier-error-kinds", "fourier-error-histogram")):
        panel.locator(".js-plotly-plot").nth(index).screenshot(path=str(artefacts / f"{name}-view.png"))

    with page.expect_download() as download_info:
        panel.get_by_role("button", name="CSV", exact=True).first.click()
    csv_path = artefacts / "fourier-filter-table.csv"
    download_info.value.save_as(csv_path)
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert [row["filter"] for row in rows] == ["no filter", "high-pass both", "high-pass mlp", "high-pass attn",
                                               "low-pass both", "low-pass mlp", "low-pass attn"]
    accuracies = [float(row["accuracy"]) for row in rows]
    assert all(0.0 <= value <= 1.0 for value in accuracies) and len(set(accuracies)) > 1
    assert rows[0]["control_accuracy_mean"] == "" and all(0.0 <= float(row["control_accuracy_mean"]) <= 1.0
                                                          for row in rows[1:])
    assert all(float(row["effect"]) == pytest.approx(accuracies[0] - float(row["accuracy"])) for row in rows[1:])

    with page.expect_download() as download_info:
        panel.get_by_role("button", name="PNG", exact=True).first.click()
    png_path = artefacts / "fourier-error-kinds.png"
    download_info.value.save_as(png_path)
    with Image.open(png_path) as image:
        assert image.format == "PNG" and image.width >= 400
