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


def test_every_run_sends_the_url_even_when_the_server_believes_it_current(monkeypatch):
    """The browser answers a rerun with the query it last received, not with its address bar, so a page that wrote
    the URL only when its own copy differed could never repair an address bar that missed an update (the SAE
    browser's click on a feature: card drawn, URL stale for good). Every run of a page sends the query again; the
    browser rewrites its address bar only where it differs."""
    from streamlit.runtime.state.query_params import QueryParams

    sent: list[dict] = []
    original = QueryParams.from_dict

    def counting(self, values):
        sent.append(dict(values))
        return original(self, values)

    monkeypatch.setattr(QueryParams, "from_dict", counting)
    at = open_app(model="adder", text="12 + 30 =")
    assert not at.exception, at.exception
    first = len(sent)
    assert first >= 1 and sent[-1]["text"] == "12 + 30 ="
    at.run()  # nothing changed: the same query, sent again
    assert len(sent) > first and sent[-1] == sent[first - 1]
