"""Links: the sidebar's model, device and dtype travel in the URL, and a bad one gets a message, not a crash."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.apptest_util import APP


def open_app(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(params)
    return at.run()


def test_a_link_opens_on_its_model_and_dtype_and_keeps_them():
    at = open_app(model="adder", dtype="float64", text="12 + 30 =")
    assert not at.exception, at.exception
    assert at.session_state["model_choice"] == "adder" and at.session_state["model_name"] == "adder"
    assert at.selectbox(key="dtype").value == "float64"
    assert any(h.value == "Model: adder" for h in at.subheader)  # the model card names it
    assert {m.label: m.value for m in at.metric}["Device / dtype"].endswith("float64")
    params = dict(at.query_params)
    assert params["model"] == "adder" and params["dtype"] == "float64" and params["text"] == "12 + 30 ="
    at.selectbox(key="dtype").set_value("float32").run()
    assert "dtype" not in at.query_params  # back to the default: left out of the link


def test_an_unknown_model_or_device_in_a_link_is_said_not_raised(tmp_path):
    at = open_app(model=str(tmp_path / "no-such-model"), device="tpu")
    assert not at.exception, at.exception
    assert at.selectbox(key="device").value == "auto"  # a device the picker does not offer is ignored
    assert any("Could not load model" in e.value for e in at.error)
