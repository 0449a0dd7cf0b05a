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
    assert at.selectbox(key="device").value == "auto"  # a device the picker does not offer is ignored, and said
    assert "Ignored link parameter(s): device='tpu' (one of auto, cpu, cuda, mps)." in [w.value for w in at.warning]
    assert any("Could not load model" in e.value for e in at.error)


def test_a_parameter_the_page_does_not_have_is_named():
    """A typo in a link (neuron= for neurons=) was dropped without a word; the page's note now lists it beside the
    values it cannot take."""
    from tests.apptest_util import ROOT

    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"model": "adder", "text": "12 + 30 =", "neuron": "5", "numbers": "-3"})
    at.switch_page(str(ROOT / "pages/fourier.py"))
    at.run()
    assert not at.exception, at.exception
    notes = [w.value for w in at.warning if w.value.startswith("Ignored link parameter(s) this page cannot use")]
    assert notes == ["Ignored link parameter(s) this page cannot use: text, neuron."], notes
    # a number outside the input's range is no parameter the page cannot use: it is named with what is used instead
    assert "The link asks for numbers=-3, outside its range (10 to 2,000): using 10 instead." in [
        w.value for w in at.warning]
