"""Figure and data export: real PNG/SVG/PDF/HTML bytes from kaleido + Chromium, JSON and CSV of results."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from components.export import data_csv, data_json, export_menu, figure_bytes
from interpscope.figures.predict import top_tokens_bar
from interpscope.results import Panel, Result


def test_static_figure_formats():
    fig = top_tokens_bar([" Paris", " the", " London"], [0.7, 0.2, 0.1])
    png = figure_bytes(fig, "png")
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width >= 1000 and image.height >= 200
    assert len(set(image.convert("RGB").getdata())) > 20  # real content, not a blank canvas
    svg = figure_bytes(fig, "svg").decode()
    assert svg.lstrip().startswith("<svg") and "Paris" in svg
    assert figure_bytes(fig, "pdf").startswith(b"%PDF-")
    html = figure_bytes(fig, "html").decode()
    assert "<html" in html and "plotly" in html.lower() and "Paris" in html


@dataclass
class Scores(Result):
    tokens: list
    relevance: np.ndarray
    score: float

    SCHEMA = "interpscope.test_scores"


def test_json_of_a_result_with_numpy_drops_what_does_not_apply():
    scores = Scores(tokens=["a", "b"], relevance=np.array([0.5, -0.25]), score=float("nan"))
    assert json.loads(data_json(scores)) == {"schema": "interpscope.test_scores", "schema_version": 1,
                                             "tokens": ["a", "b"], "relevance": [0.5, -0.25]}


def part(data) -> Panel:
    return Panel(of="interpscope.relevance", part="test", data=data)


def test_csv_shapes_of_panels():
    frame = pd.read_csv(io.BytesIO(data_csv(part([{"token": "a", "prob": 0.5}, {"token": "b", "prob": 0.25}]))))
    assert list(frame.columns) == ["token", "prob"] and frame["prob"].tolist() == [0.5, 0.25]
    frame = pd.read_csv(io.BytesIO(data_csv(part({"x": [1, 2], "y": [3, 4]}))))
    assert frame["y"].tolist() == [3, 4]
    frame = pd.read_csv(io.BytesIO(data_csv(part({"model": "m", "conservation": {"input_sum": 1.5}}))))
    assert dict(zip(frame["key"], frame["value"].astype(str), strict=True)) == {"model": "m",
                                                                                "conservation.input_sum": "1.5"}
    frame = pd.read_csv(io.BytesIO(data_csv(part(pd.DataFrame({"a": [1]})))))
    assert frame["a"].tolist() == [1]
    document = json.loads(data_json(part(pd.DataFrame({"a": [1, 2]}))))
    assert document == {"schema": "interpscope.panel", "schema_version": 1, "of": "interpscope.relevance",
                        "part": "test", "data": [{"a": 1}, {"a": 2}]}


def test_a_result_without_a_table_exports_its_document_as_rows():
    frame = pd.read_csv(io.BytesIO(data_csv(Scores(tokens=["a"], relevance=np.array([1.0]), score=2.0))))
    assert dict(zip(frame["key"], frame["value"].astype(str), strict=True))["score"] == "2.0"


def test_export_menu_takes_only_results_and_a_panel_names_a_result():
    with pytest.raises(TypeError, match="takes a Result"):
        export_menu(None, {"tokens": ["a"]}, key="x", filename="x")
    with pytest.raises(ValueError, match="interpscope"):
        Panel(of="tokens", part="x", data=[])


def test_the_whole_file_tidy_csv_names_its_method():
    from interpscope.relevance.file_attribution import FileRun, FileSpec

    spec = FileSpec(file_sha256="0" * 64, n_rows=2, model="smollm2-135m", method="gradxinput", options={})
    rows = [{"row": 0, "tokens": ["The", " cat"], "relevance": [0.1, 0.9], "target": " sat", "sinks": [0],
             "label": None},
            {"row": 1, "tokens": ["She"], "relevance": [1.0], "target": " smiled", "sinks": [0], "label": "x"}]
    frame = pd.read_csv(io.BytesIO(data_csv(FileRun("f", spec, rows, [], True))))
    assert len(frame) == 3 and set(frame["method"]) == {"gradxinput"} and set(frame["model"]) == {"smollm2-135m"}
    assert {"row", "position", "token", "relevance", "target", "label", "sink"} <= set(frame.columns)


def test_logit_lens_ranks_are_integers_on_decade_ticks():
    from interpscope.figures.flow import lens_figure

    fig = lens_figure(["embed", "block 0", "block 1"], np.array([0.01, 0.2, 0.6]), np.array([28400, 85, 1]), "' x'")
    axis = fig.layout.yaxis2
    assert list(axis.tickvals) == [1, 10, 100, 1000, 10000, 100000]
    assert list(axis.ticktext) == ["1", "10", "100", "1k", "10k", "100k"]
    assert [type(v) for v in fig.data[1].y] == [int] * 3


def test_graph_labels_of_one_row_never_overlap():
    from interpscope.figures.draw import CHAR_PX, PLOT_PX, spread_row

    wanted = [(5.0, "L3.H7"), (5.0, "L3.H11"), (5.1, "L3.MLP"), (5.2, "L3.H2"), (9.0, "L3.H0")]
    xs, below = spread_row(wanted, span=12.0)
    span = max(12.0, max(xs) + 1)
    for side in (below, set(range(len(wanted))) - below):
        placed = sorted((xs[i], len(wanted[i][1]) * CHAR_PX * span / PLOT_PX) for i in side)
        for (x0, w0), (x1, w1) in zip(placed, placed[1:], strict=False):
            assert x1 - x0 >= (w0 + w1) / 2, (placed, below)  # labels on one side of the row do not touch
    assert xs[0] == 5.0 and all(x >= want for x, (want, _) in zip(xs, wanted, strict=True))
    xs, below = spread_row(wanted, span=12.0, alternate=False)  # one side only: a full label width apart
    span = max(12.0, max(xs) + 1)
    placed = sorted((xs[i], len(wanted[i][1]) * CHAR_PX * span / PLOT_PX) for i in range(len(wanted)))
    assert not below and all(x1 - x0 >= (w0 + w1) / 2 for (x0, w0), (x1, w1) in zip(placed, placed[1:], strict=False))


def test_the_command_lines_json_takes_only_results():
    from interpscope.cli.common import emit_json

    with pytest.raises(TypeError, match="takes a Result"):
        emit_json({"store": "x"})
