"""Results in a notebook (issue 45.21; tests/project/test_notebook.py runs the shipped quickstart): `.figure()`,
`.to_frame()` and the inline view of AttributionGraph, InterventionResult and ModelList (they raised), and figures
that still render when the notebook is saved and opened again offline: plotly.js was embedded in the first figure a
kernel showed only, so a re-run cell, or any figure of a saved notebook whose first figure's cell was re-run or
cleared, came up blank.

A real kernel runs the cells (nbclient; the second displays the same results again, as re-running a cell does), the
notebook is written with nbformat and read back, and every figure output must carry plotly.js and draw its plot in
headless Chromium with every network request refused."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

CHROMIUM = os.environ.get("INTERPSCOPE_CHROMIUM", "/usr/bin/chromium")
PLOTLY_JS = "plotly.js v"  # the banner at the top of the embedded library

SETUP = '''
from interpscope.graphs.interventions import InterventionResult
from interpscope.graphs.result import AttributionGraph
from interpscope.models.loading import model_list

graph = AttributionGraph(
    model="tiny", transcoders="set", text="The cat", tokens=["The", " cat"], target={"token": " sat", "id": 3},
    logit=2.0, logit_inputs_sum=1.5,
    nodes=[{"id": "E_0", "kind": "embedding", "layer": -1, "position": 0, "token": "The", "influence": 0.3},
           {"id": "E_1", "kind": "embedding", "layer": -1, "position": 1, "token": " cat", "influence": 0.5},
           {"id": "F0_5_1", "kind": "feature", "layer": 0, "position": 1, "token": " cat", "feature": 5,
            "activation": 1.2, "influence": 0.4},
           {"id": "R1_1", "kind": "error", "layer": 1, "position": 1, "token": " cat", "influence": 0.1},
           {"id": "L_3", "kind": "logit", "layer": 2, "position": 1, "token": " sat", "feature": 3,
            "activation": 2.0, "influence": 1.0}],
    edges=[{"source": "E_1", "target": "F0_5_1", "weight": 0.7}, {"source": "F0_5_1", "target": "L_3", "weight": 0.9},
           {"source": "R1_1", "target": "L_3", "weight": -0.2}])
intervention = InterventionResult(
    model="tiny", text="The cat", target={"token": " sat"}, mode="ablate", factor=0.0, nodes=["F0_5_1"],
    label="L0#5@1", clean_logit=2.0, predicted=-0.5, predicted_pruned=-0.4, actual=-0.6)
models = model_list()
'''
SHOW = "display(graph)\ndisplay(intervention)\ndisplay(models)\nintervention.to_frame()"


def _results():
    namespace: dict = {}
    exec(SETUP, namespace)  # the same results the kernel builds
    return namespace["graph"], namespace["intervention"], namespace["models"]


def test_every_result_named_in_the_issue_has_a_figure_a_table_and_an_inline_view():
    import plotly.graph_objects as go

    for result in _results():
        assert isinstance(result.figure(), go.Figure), type(result).__name__
        frame = result.to_frame()
        assert len(frame) >= 1 and len(frame.columns) >= 3, type(result).__name__
        assert PLOTLY_JS in result._repr_html_(), type(result).__name__


def test_every_inline_figure_carries_plotly_js_not_only_the_first():
    from interpscope.config import ASSETS_DIR
    from interpscope.sae.sweep import load_table

    table = load_table(ASSETS_DIR / "sae_sweeps" / "smollm2-135m-blocks.15-resid-post")  # a result that had a figure
    graph, intervention, models = _results()
    outputs = [table._repr_html_(), table._repr_html_(), graph._repr_html_(), intervention._repr_html_(),
               graph._repr_html_()]  # the repeats: re-run cells
    assert [PLOTLY_JS in html and "Plotly.newPlot" in html for html in outputs] == [True] * len(outputs)


def test_a_result_without_figure_or_table_still_shows_inline():
    from dataclasses import dataclass

    from interpscope.results import Result

    @dataclass
    class Bare(Result):
        SCHEMA = "interpscope.test_bare"
        value: int = 3

    with pytest.raises(NotImplementedError, match="Bare has no figure"):
        Bare().figure()
    assert Bare()._repr_html_().startswith("<pre>") and "interpscope.test_bare" in Bare()._repr_html_()


def _run_notebook(path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(SHOW),
                      nbformat.v4.new_code_cell(SHOW)]  # the same cell again: a re-run
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    except Exception as err:  # noqa: BLE001 - no kernel here (jupyter_client raises several kinds)
        if "kernel" in str(err).lower() and "No such kernel" in str(err):
            pytest.skip(f"no Jupyter kernel: {err}")
        raise
    nbformat.write(notebook, path)


def test_a_saved_notebook_renders_every_figure_offline(tmp_path):
    path = tmp_path / "results.ipynb"
    _run_notebook(path)
    reopened = nbformat.read(path, as_version=4)
    nbformat.validate(reopened)
    figures = [output["data"]["text/html"] for cell in reopened.cells for output in cell.get("outputs", [])
               if "text/html" in output.get("data", {}) and "plotly-graph-div" in output["data"]["text/html"]]
    assert len(figures) == 6, len(figures)  # three results, shown by the cell and by its re-run
    assert all(PLOTLY_JS in html for html in figures), [PLOTLY_JS in html for html in figures]
    tables = [output["data"]["text/html"] for cell in reopened.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "execute_result"]
    assert len(tables) == 2 and all("predicted_pruned" in html for html in tables)  # to_frame() of the intervention

    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium to render the saved figures in")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            context = browser.new_context()
            fetched: list[str] = []

            def offline(route):
                if route.request.url.startswith("file://"):
                    route.continue_()
                else:
                    fetched.append(route.request.url)
                    route.abort()

            context.route("**/*", offline)
            page = context.new_page()
            for index, html in enumerate(figures):  # each output on its own: none may lean on another's plotly.js
                page_file = tmp_path / f"figure-{index}.html"
                page_file.write_text(f"<!DOCTYPE html><html><body>{html}</body></html>", encoding="utf-8")
                page.goto(page_file.as_uri())
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
                assert page.evaluate("typeof window.Plotly") == "object", index
            assert not fetched, fetched
        finally:
            browser.close()
