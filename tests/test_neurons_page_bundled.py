"""The Entropy neurons page on the bundled SmolLM2 (weight views and the text view; no corpus pass).

Kept apart from test_neurons_page.py, whose module fixture points the data dir at a temporary folder."""
from __future__ import annotations

from tests.apptest_util import open_page
from tests.test_neurons_page import PAGE, chart, values


def test_bundled_model_weight_views(bundled_lm):
    at = open_page(PAGE)
    assert not at.exception, at.exception
    spec = chart(at, "Layer 29 neurons")
    assert len(values(spec["data"][0]["x"])) == 1536
    table = at.dataframe[0].value
    assert table["rho"].is_monotonic_decreasing
    assert chart(at, "Cosine of each layer-29 neuron")
    assert chart(at, "Your text")  # the default sentence runs through the model
