"""The Relevance maps page on the shipped Mamba LM (streamlit.testing): MambaLRP offered automatically, its map
with the conservation readout, and the Mamba-only view (relevance vs distance, error per disabled fix)."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.apptest_util import open_page

PAGE = "pages/relevance.py"
DEFAULT_TEXT = "Mr. Darcy looked at Elizabeth, and Elizabeth looked back at"


@pytest.fixture(scope="module")
def app():
    at = open_page(PAGE, model_choice="mamba-tiny")
    assert not at.exception, at.exception
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    return at


def heatmaps(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="relevance-heatmap"' in m.value]


def chart(at, title: str) -> dict:
    """The figure spec of the chart whose title contains `title`."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    found = [s for s in specs if title in s["layout"].get("title", {}).get("text", "")]
    assert found, f"no chart titled {title!r}"
    return found[0]


def plotly_array(value) -> np.ndarray:
    """A trace array from a figure spec (plotly may ship it base64-encoded)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    return np.asarray(value)


def test_mambalrp_is_the_default_method_for_mamba(app):
    from interpscope.models import load_model

    methods = app.selectbox(key="relevance-method").options
    assert methods[0] == "MambaLRP" and "AttnLRP" not in methods and "CP-LRP" not in methods
    maps = heatmaps(app)
    assert len(maps) == 1
    n_tokens = load_model("mamba-tiny").encode(DEFAULT_TEXT).shape[1]
    assert maps[0].count('class="relevance-token"') == n_tokens
    assert any(m.value.startswith("**MambaLRP: relevance for") for m in app.markdown)
    readout = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    bars = [r for r in readout if r["layout"].get("barmode") == "relative"]
    assert len(bars) == 1
    parts = {trace["name"].split(":")[0]: float(trace["x"][0]) for trace in bars[0]["data"]}
    assert "softmax (dropped by AttnLRP)" not in parts  # Mamba has no softmax: no softmax share is shown
    value = float(bars[0]["layout"]["shapes"][0]["x0"])
    assert abs(parts["rest (numerical error)"]) < 1e-3 * abs(value)
    assert abs(sum(parts.values()) - value) < 1e-6 * abs(value)
    words = " ".join([maps[0]] + [c.value for c in app.caption] + [m.value for m in app.markdown]).lower()
    assert "biases absorb" in words  # the readout is there, in Mamba's words:
    assert "attention sink" not in words and "position embedding" not in words
    assert not app.toggle(key="relevance-bos").value  # no attention, no sink to give a BOS: off by default


def test_fix_ablation_chart_shows_each_fix_raising_the_error(app):
    spec = chart(app, "Conservation error per disabled fix")
    bar = spec["data"][0]
    labels, errors = list(bar["x"]), plotly_array(bar["y"]).tolist()
    assert labels[0] == "all fixes on" and len(labels) == 6
    assert all(error > errors[0] for error in errors[1:])
    assert spec["layout"]["yaxis"]["type"] == "log"


def test_distance_profile_over_prompts(app):
    app.slider(key="mamba-distance-n").set_value(3).run()
    app.button(key="mamba-distance-run").click().run()
    assert not app.exception, app.exception
    spec = chart(app, "relevance vs distance")
    share = plotly_array(spec["data"][0]["y"])
    assert len(share) > 5 and np.all(share > 0) and np.all(share <= 1)
    assert spec["layout"]["xaxis"]["title"]["text"].startswith("tokens back")
    assert "3 prompts" in spec["layout"]["title"]["text"]


def test_latent_relevance_and_baselines_work_for_mamba(app):
    app.toggle(key="relevance-latent").set_value(True).run()
    app.button(key="relevance-run").click().run()
    assert not app.exception, app.exception
    assert any(s.value == "Inside the model" for s in app.subheader)
    app.selectbox(key="relevance-method").set_value("ig").run()
    app.button(key="relevance-run").click().run()
    assert not app.exception, app.exception
    assert any(m.value.startswith("**Integrated Gradients: relevance for") for m in app.markdown)
    assert any("Integrated Gradients is complete" in c.value for c in app.caption)
