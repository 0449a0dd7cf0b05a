"""The Entropy neurons page on the bundled SmolLM2: weight views, the neuron detail from the shipped store (whose
top contexts are never an attention sink), and the text view.

Kept apart from test_neurons_page.py, whose module fixture points the data dir at a temporary folder."""
from __future__ import annotations

import pytest

from tests.apptest_util import open_page
from tests.ui.test_neurons_page import PAGE, chart, values

pytestmark = pytest.mark.bundled


def test_bundled_model_views_open_from_the_shipped_store(bundled_lm):
    at = open_page(PAGE)
    assert not at.exception, at.exception
    assert any("precomputed store" in c.value for c in at.caption)
    spec = chart(at, "Layer 29 neurons")
    assert len(values(spec["data"][0]["x"])) == 1536
    table = at.dataframe[0].value
    assert table["rho"].is_monotonic_decreasing
    at.segmented_control(key="en-view").set_value("Token-frequency neurons").run()
    assert chart(at, "Cosine of each layer-29 neuron")
    at.segmented_control(key="en-view").set_value("Your text").run()
    at.button(key="en-text-run").click().run()
    assert chart(at, "Your text")  # the default sentence runs through the model, on Run


def test_position_0_never_tops_neuron_29_830s_contexts(bundled_lm):
    at = open_page(PAGE, **{"en-neurons": "29.830"})
    at.segmented_control(key="en-view").set_value("Neuron detail").run()
    assert not at.exception, at.exception
    contexts = [df.value for df in at.dataframe if "context" in df.value.columns][0]
    assert len(contexts) == 10
    assert not contexts["context"].str.startswith("[[").any()  # the firing token always has text before it
    assert contexts["activation"].max() < 40  # the sink cluster at 48-52 is gone
    hist = chart(at, "Activation of neuron 29.830")
    assert max(values(hist["data"][0]["x"])) < 40
