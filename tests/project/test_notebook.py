"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel) on the bundled
models, and its outputs are what the API promises: each result's schema, a rendered figure or table per result."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")  # test extra; installed by scripts/setup.sh
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
SCHEMAS = ["interpscope.relevance", "interpscope.sae.features", "interpscope.sae.feature", "interpscope.sae.steering",
           "interpscope.neurons.ablation", "interpscope.fourier.filter_table"]

pytestmark = pytest.mark.bundled


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "the shipped notebook carries no outputs (they are made by running it)"
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}})
    client.execute()  # raises CellExecutionError with the cell and traceback if any cell fails
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _streams(cell) -> str:
    return "".join(out.text for out in cell.outputs if out.output_type == "stream" and out.name == "stdout")


def _rich(cell) -> dict:
    results = [out.data for out in cell.outputs if out.output_type in ("execute_result", "display_data")]
    assert results, "the cell displays its result"
    return results[-1]


def test_every_cell_ran_and_printed_its_schema(executed):
    assert not [out for cell in executed for out in cell.outputs if out.output_type == "error"]
    printed = "".join(_streams(cell) for cell in executed)
    positions = [printed.find(schema + (" " if schema == "interpscope.relevance" else "\n")) for schema in SCHEMAS]
    assert all(p >= 0 for p in positions), printed
    assert positions == sorted(positions)
    assert _streams(executed[0]).startswith("smollm2-135m 30 layers")


def test_prediction_and_map_render_inline(executed):
    table = _rich(executed[1])["text/html"]
    assert "<table" in table and "Paris" in table  # the bundled model's top next token
    relevance = _rich(executed[2])
    html = relevance["text/html"]
    assert "plotly" in html.lower() and "France" in html
    assert "methods: ['attnlrp'" in _streams(executed[2])


def test_plotly_js_is_in_every_figure(executed):
    """Each figure output carries plotly.js (issue 45.21: sent once per kernel, a re-run cell or a saved notebook
    showed blank figures; tests/project/test_notebook_figures.py renders a saved notebook offline)."""
    shown = [out.data.get("text/html", "") for cell in executed for out in cell.outputs
             if out.output_type in ("execute_result", "display_data")]
    figures = [html for html in shown if "plotly-graph-div" in html]
    assert len(figures) >= 1
    bundles = [html.count("plotly.js v") for html in figures]
    assert bundles == [1] * len(figures)  # offline, embedded in each, never fetched
    # no script is fetched from a network (the embedded bundle itself mentions cdn.plot.ly in its config)
    assert not any(re.search(r"<script[^>]*src=[\"']?https?://", html) for html in figures)


def test_sae_neuron_and_fourier_cells_show_tables(executed):
    by_schema = {}
    for cell in executed[3:]:
        for schema in SCHEMAS[1:]:
            if (schema + "\n") in _streams(cell):
                by_schema[schema] = _rich(cell)
    assert set(by_schema) == set(SCHEMAS[1:])
    assert "29.830" in by_schema["interpscope.neurons.ablation"]["text/html"]
    fourier = by_schema["interpscope.fourier.filter_table"]["text/html"]
    assert "no filter" in fourier and "<table" in fourier
