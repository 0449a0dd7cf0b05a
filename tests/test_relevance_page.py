"""The Relevance maps page through streamlit.testing: paste, upload, methods, targets, messages, extras."""
from __future__ import annotations

import json

import pytest

from tests.apptest_util import open_page

pytestmark = pytest.mark.bundled
PAGE = "pages/relevance.py"


@pytest.fixture
def app(bundled_lm):
    at = open_page(PAGE)
    assert not at.exception, at.exception
    return at


def heatmaps(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="relevance-heatmap"' in m.value]


def z_rows(trace: dict) -> int:
    """Rows of a heatmap trace's z (plotly sends numpy arrays as typed arrays with a shape)."""
    z = trace["z"]
    return int(z["shape"].split(",")[0]) if isinstance(z, dict) else len(z)


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_text_gives_an_attnlrp_map_with_conservation(app, bundled_lm):
    maps = heatmaps(app)
    assert len(maps) == 1
    n_tokens = bundled_lm.encode("Mr. Darcy looked at Elizabeth, and Elizabeth looked back at").shape[1]
    assert maps[0].count('class="relevance-token"') == n_tokens
    values = metrics(app)
    assert float(values["Relative error"]) < 1e-3
    assert abs(float(values["Softmax share"])) > 0.01  # AttnLRP's gap, shown and counted
    assert any(m.value.startswith("**AttnLRP: relevance for") for m in app.markdown)


def test_method_switch(app):
    app.selectbox(key="relevance-method").set_value("cplrp").run()
    assert not app.exception
    values = metrics(app)
    assert abs(float(values["Softmax share"])) < 1e-3 and float(values["Relative error"]) < 1e-3
    app.selectbox(key="relevance-method").set_value("gradxinput").run()
    assert not app.exception
    assert "Softmax share" not in metrics(app)
    assert any("no conservation law" in c.value for c in app.caption)
    assert len(heatmaps(app)) == 1


def test_contrast_and_picked_token_targets(app):
    app.radio(key="relevance-target").set_value("A rather than B").run()
    app.text_input(key="relevance-a").input(" her").run()
    app.text_input(key="relevance-b").input(" him").run()
    assert not app.exception
    assert any("relevance for ' her' rather than ' him'" in m.value for m in app.markdown)
    app.radio(key="relevance-target").set_value("A token I pick").run()
    app.text_input(key="relevance-typed").input(" Pemberley Hall").run()
    assert any("tokens" in e.value and "single token" in e.value for e in app.error)
    app.text_input(key="relevance-typed").input(" the").run()
    assert not app.error
    assert any("relevance for ' the'" in m.value for m in app.markdown)


def test_paste_new_text(app):
    app.text_area(key="relevance-text").input("The cat sat on the").run()
    assert not app.exception
    assert heatmaps(app)[0].count('class="relevance-token"') == 5


def upload(app, name: str, data: bytes, mime: str = "text/plain"):
    app.radio(key="relevance-mode").set_value("Upload a file").run()
    app.file_uploader(key="relevance-upload").set_value((name, data, mime)).run()
    assert not app.exception
    return app


def test_upload_csv_and_pick_a_row(app):
    upload(app, "examples.csv", b'id,text\n1,"The sun rose over the"\n2,"Mr. Bingley danced with"\n', "text/csv")
    assert ">sun<" in heatmaps(app)[0].replace(" ", "")
    app.number_input(key="relevance-row").set_value(1).run()
    assert not app.exception
    assert ">danced<" in heatmaps(app)[0].replace(" ", "")


@pytest.mark.parametrize("name, data, message", [
    ("empty.txt", b"", "empty"),
    ("blob.txt", b"\x00\x01\x02\x03binary\x00", "binary"),
    ("huge.txt", b"word " * (4_300_000), "MB; the limit is"),
    ("long.txt", ("word " * 3000).encode(), "tokens long"),
])
def test_bad_uploads_get_messages(app, name, data, message):
    upload(app, name, data)
    assert any(message in e.value for e in app.error) or any(message in w.value for w in app.warning)
    assert not heatmaps(app)


def test_compare_latent_and_continuation(app):
    app.toggle(key="relevance-compare").set_value(True).run()
    app.selectbox(key="relevance-second").set_value("cplrp").run()
    assert not app.exception
    assert len(heatmaps(app)) == 2
    app.toggle(key="relevance-compare").set_value(False).run()
    app.toggle(key="relevance-latent").set_value(True).run()
    assert not app.exception
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert "Residual-stream relevance, layers x tokens" in titles and "Top attention heads" in titles
    latent = charts[titles.index("Residual-stream relevance, layers x tokens")]
    assert z_rows(latent["data"][0]) == 31  # 30 blocks + the final output
    app.radio(key="relevance-target").set_value("A continuation").run()
    app.number_input(key="relevance-n-new").set_value(3).run()
    assert not app.exception
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    assert len(charts) == 1 and z_rows(charts[0]["data"][0]) == 3


def test_faithfulness_curves_and_batch(app):
    app.text_area(key="relevance-text").input("Elizabeth smiled at").run()
    app.button(key="relevance-faith").click().run()
    assert not app.exception
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    curves = [c for c in charts if c["layout"]["title"]["text"] == "Perturbation curves on this input"]
    assert len(curves) == 1 and len(curves[0]["data"]) == 2 * 5  # MoRF + LeRF for each of the 5 methods
    app.radio(key="relevance-batch-source").set_value("Upload a file").run()
    app.file_uploader(key="relevance-batch-upload").set_value(
        ("batch.txt", b"She smiled at\nHe walked to the\n", "text/plain")).run()
    app.multiselect(key="relevance-batch-methods").set_value(["attnlrp", "cplrp"]).run()
    app.button(key="relevance-batch-run").click().run()
    assert not app.exception
    table = app.dataframe[-1].value
    assert list(table["method"]) == ["AttnLRP", "CP-LRP"] and list(table["texts"]) == [2, 2]
