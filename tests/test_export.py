"""Figure and data export: real PNG/SVG/PDF/HTML bytes from kaleido + Chromium, JSON and CSV of results."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
from PIL import Image

from components.charts import top_tokens_bar
from components.export import data_csv, data_json, figure_bytes


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
class Result:
    tokens: list
    relevance: np.ndarray
    score: float


def test_json_of_a_dataclass_with_numpy():
    result = Result(tokens=["a", "b"], relevance=np.array([0.5, -0.25]), score=float("nan"))
    assert json.loads(data_json(result)) == {"tokens": ["a", "b"], "relevance": [0.5, -0.25], "score": None}


def test_csv_shapes():
    frame = pd.read_csv(io.BytesIO(data_csv([{"token": "a", "prob": 0.5}, {"token": "b", "prob": 0.25}])))
    assert list(frame.columns) == ["token", "prob"] and frame["prob"].tolist() == [0.5, 0.25]
    frame = pd.read_csv(io.BytesIO(data_csv({"x": [1, 2], "y": [3, 4]})))
    assert frame["y"].tolist() == [3, 4]
    frame = pd.read_csv(io.BytesIO(data_csv({"model": "m", "conservation": {"input_sum": 1.5}})))
    assert dict(zip(frame["key"], frame["value"].astype(str))) == {"model": "m", "conservation.input_sum": "1.5"}
    frame = pd.read_csv(io.BytesIO(data_csv(pd.DataFrame({"a": [1]}))))
    assert frame["a"].tolist() == [1]
