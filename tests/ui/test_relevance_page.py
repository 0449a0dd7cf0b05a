"""The Relevance maps page through streamlit.testing: Run, paste, upload, methods, targets, readouts, the URL."""
from __future__ import annotations

import html
import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.apptest_util import APP, ROOT, open_page

pytestmark = pytest.mark.bundled
PAGE = "pages/relevance.py"


@pytest.fixture
def app(bundled_lm):
    at = open_page(PAGE)
    assert not at.exception, at.exception
    return at


def run(at: AppTest) -> AppTest:
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    return at


def heatmaps(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="relevance-heatmap"' in m.value]


def z_rows(trace: dict) -> int:
    """Rows of a heatmap trace's z (plotly sends numpy arrays as typed arrays with a shape)."""
    z = trace["z"]
    return int(z["shape"].split(",")[0]) if isinstance(z, dict) else len(z)


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def readout_parts(at) -> list[dict[str, float]]:
    """Each readout bar's parts: {trace name's label: value}, and the explained value from its marker line."""
    found = []
    for spec in charts(at):
        if spec["layout"].get("barmode") == "relative":
            parts = {trace["name"].split(":")[0]: float(trace["x"][0]) for trace in spec["data"]}
            parts["value"] = float(spec["layout"]["shapes"][0]["x0"])
            found.append(parts)
    return found


def test_nothing_runs_before_run_then_attnlrp_splits_the_logit(app, bundled_lm):
    assert not heatmaps(app) and any("press **Run**" in i.value for i in app.info)
    run(app)
    maps = heatmaps(app)
    assert len(maps) == 1
    n_tokens = bundled_lm.encode("Mr. Darcy looked at Elizabeth, and Elizabeth looked back at").shape[1]
    assert maps[0].count('class="relevance-token"') == n_tokens + 1  # SmolLM2 adds no BOS: the page prepends it
    legend = html.unescape(maps[0])
    assert "Not used for the colour scale: position 0 '<|endoftext|>' (prepended BOS" in legend  # named
    assert "position 1 'Mr'" not in legend  # the first word is explained like any other
    (parts,) = readout_parts(app)
    assert "biases" not in parts  # SmolLM2 has no bias to absorb relevance: no bar for it (absent, not 0)
    total = parts["input tokens"] + parts["softmax (dropped by AttnLRP)"] + parts["rest (numerical error)"]
    assert abs(total - parts["value"]) < 1e-6 * abs(parts["value"])  # the shares add up to the logit
    assert abs(parts["rest (numerical error)"]) < 1e-3 * abs(parts["value"])
    assert abs(parts["softmax (dropped by AttnLRP)"]) > 0.01 * abs(parts["value"])  # AttnLRP's own gap, shown
    assert any(m.value.startswith("**Target logit:**") for m in app.markdown)
    sentence = " ".join(c.value for c in app.caption)
    assert f"{parts['input tokens']:.3g}" in sentence and "softmaxes drop" in sentence


def test_changing_a_widget_does_not_recompute_until_run(app):
    run(app)
    app.selectbox(key="relevance-method").set_value("cplrp").run()
    assert any("changed since the last Run" in c.value for c in app.caption)
    assert any(m.value.startswith("**AttnLRP: relevance for") for m in app.markdown)
    run(app)
    assert any(m.value.startswith("**CP-LRP: relevance for") for m in app.markdown)
    (parts,) = readout_parts(app)
    assert "softmax (dropped by AttnLRP)" not in parts  # CP-LRP drops nothing there
    app.selectbox(key="relevance-method").set_value("gradxinput").run()
    run(app)
    assert not readout_parts(app)
    assert any("no conservation law" in c.value for c in app.caption)
    app.selectbox(key="relevance-method").set_value("ig").run()
    run(app)
    (parts,) = readout_parts(app)
    # the bar stacks to the value: its gap part is minus the sentence's gap (sum - (f(x) - f(baseline))), named so
    assert set(parts) == {"input tokens", "f(baseline)", "minus the integration gap", "value"}
    stacked = parts["input tokens"] + parts["f(baseline)"] + parts["minus the integration gap"]
    assert abs(stacked - parts["value"]) < 1e-6
    assert any("Integrated Gradients is complete" in c.value for c in app.caption)


def test_contrast_and_picked_token_targets(app):
    app.radio(key="relevance-target").set_value("A rather than B").run()
    app.text_input(key="relevance-a").input(" her").run()
    app.text_input(key="relevance-b").input(" him").run()
    run(app)
    assert any("relevance for ' her' rather than ' him'" in m.value for m in app.markdown)
    assert any(m.value.startswith("**Logit difference (' her' rather than ' him'):**") for m in app.markdown)
    app.radio(key="relevance-target").set_value("A token I pick").run()
    app.text_input(key="relevance-typed").input(" Pemberley Hall").run()
    app.button(key="relevance-run").click().run()
    assert any("tokens" in e.value and "single token" in e.value for e in app.error)
    app.text_input(key="relevance-typed").input(" the").run()
    run(app)
    assert not app.error
    assert any("relevance for ' the'" in m.value for m in app.markdown)


def test_paste_new_text(app):
    app.text_area(key="relevance-text").input("The cat sat on the").run()
    run(app)
    # five tokens of the text after the prepended BOS, which is shown and named (SmolLM2's tokenizer adds none)
    assert heatmaps(app)[0].count('class="relevance-token"') == 6 and "prepended BOS" in heatmaps(app)[0]


def upload(app, name: str, data: bytes, mime: str = "text/plain"):
    app.radio(key="relevance-mode").set_value("Upload a file").run()
    app.file_uploader(key="relevance-upload").set_value((name, data, mime)).run()
    assert not app.exception
    return app


def row_box(app):
    return next(n for n in app.number_input if n.key.startswith("relevance-row-"))


def test_upload_csv_pick_a_row_then_replace_the_file(app):
    upload(app, "examples.csv", b'id,text\n1,"The sun rose over the"\n2,"Mr. Bingley danced with"\n', "text/csv")
    run(app)
    assert ">sun<" in heatmaps(app)[0].replace(" ", "")
    row_box(app).set_value(1).run()
    run(app)
    assert ">danced<" in heatmaps(app)[0].replace(" ", "")
    app.file_uploader(key="relevance-upload").set_value(("other.txt", b"She smiled at\nHe bowed to\n",
                                                          "text/plain")).run()
    run(app)
    assert row_box(app).value == 0  # a new file: the box and the map both start at row 0
    assert ">smiled<" in heatmaps(app)[0].replace(" ", "")


@pytest.mark.parametrize("name, data, message", [
    ("empty.txt", b"", "empty"),
    ("blob.txt", b"\x00\x01\x02\x03binary\x00", "binary"),
    ("huge.txt", b"word " * (4_300_000), "MiB"),
    ("long.txt", ("word " * 3000).encode(), "tokens long"),
])
def test_bad_uploads_get_messages(app, name, data, message):
    upload(app, name, data)
    if any(b.key == "relevance-run" for b in app.button):  # the text reads fine: the model finds it too long
        app.button(key="relevance-run").click().run()
    assert not app.exception
    assert any(message in e.value for e in app.error) or any(message in w.value for w in app.warning)
    assert not heatmaps(app)


def test_compare_latent_and_continuation(app):
    app.toggle(key="relevance-compare").set_value(True).run()
    app.selectbox(key="relevance-second").set_value("cplrp").run()
    run(app)
    assert len(heatmaps(app)) == 2 and len(readout_parts(app)) == 2
    app.toggle(key="relevance-compare").set_value(False).run()
    app.toggle(key="relevance-latent").set_value(True).run()
    run(app)
    titles = [c["layout"].get("title", {}).get("text") for c in charts(app)]
    assert "Residual-stream relevance, layers x tokens" in titles and "Top attention heads" in titles
    latent = charts(app)[titles.index("Residual-stream relevance, layers x tokens")]
    assert z_rows(latent["data"][0]) == 31  # 30 blocks + the final output
    app.radio(key="relevance-target").set_value("A continuation").run()
    app.number_input(key="relevance-n-new").set_value(3).run()
    run(app)
    assert len(charts(app)) == 1 and z_rows(charts(app)[0]["data"][0]) == 3


def test_faithfulness_curves_and_batch(app):
    app.text_area(key="relevance-text").input("Elizabeth smiled at").run()
    run(app)
    app.button(key="relevance-faith").click().run()
    assert not app.exception
    curves = [c for c in charts(app) if c["layout"].get("title", {}).get("text") == "Perturbation curves on this input"]
    assert len(curves) == 1 and len(curves[0]["data"]) == 2 * 5  # MoRF + LeRF for each of the 5 methods
    app.radio(key="relevance-batch-source").set_value("Upload a file").run()
    app.file_uploader(key="relevance-batch-upload").set_value(
        ("batch.txt", b"She smiled at\nHe walked to the\n", "text/plain")).run()
    app.multiselect(key="relevance-batch-methods").set_value(["attnlrp", "cplrp"]).run()
    app.button(key="relevance-batch-run").click().run()
    assert not app.exception
    table = app.dataframe[-1].value
    assert list(table["method"]) == ["AttnLRP", "CP-LRP"] and list(table["texts"]) == [2, 2]


def test_the_url_holds_the_inputs_and_a_link_restores_the_view(bundled_lm):
    at = open_page(PAGE)
    at.text_area(key="relevance-text").input("The cat sat on the").run()
    at.selectbox(key="relevance-method").set_value("cplrp").run()
    run(at)
    params = dict(at.query_params)
    assert params["text"] == "The cat sat on the" and params["method"] == "cplrp" and params["run"] == "1"
    fresh = AppTest.from_file(APP, default_timeout=300)
    fresh.run()
    fresh.switch_page(str(ROOT / PAGE))
    for key, value in params.items():
        fresh.query_params[key] = value
    fresh.run()
    assert not fresh.exception
    assert any(m.value.startswith("**CP-LRP: relevance for") for m in fresh.markdown)
    assert heatmaps(fresh)[0].count('class="relevance-token"') == 6 and "prepended BOS" in heatmaps(fresh)[0]


def test_every_run_gives_the_browser_the_bos_value_the_page_chose(app):
    """The page turns Prepend BOS on for this model by setting it, not by the widget's own default (off). A value
    set so reaches the browser only with set_value; were it sent on the first run alone, a rerun that interrupts
    that run before the browser draws the toggle (a quick Ctrl+Enter in the text box) gets it drawn off while the
    page believes on, and the next Run then explains the text without BOS (seen in CI under load)."""
    for _ in range(3):  # the first run, and reruns that did not set it again
        toggle = app.toggle(key="relevance-bos")
        assert toggle.value is True
        assert toggle.proto.default is False  # the widget's own default: what the browser shows without set_value
        assert toggle.proto.set_value and toggle.proto.value is True
        app.run()
        assert not app.exception, app.exception


def test_a_linked_token_outside_the_top_10_is_explained_not_swapped(bundled_lm):
    """pick=' Paris' in a link whose text does not rank it in its top 10 explained the top token instead, without a
    word; now the token goes to the typed-token box (which takes any single token) and the page says so."""
    fresh = AppTest.from_file(APP, default_timeout=300)
    fresh.query_params.update({"text": "The cat sat on the", "target": "A token I pick", "pick": " Paris",
                               "run": "1"})
    fresh.switch_page(str(ROOT / PAGE))
    fresh.run()
    assert not fresh.exception, fresh.exception
    assert fresh.text_input(key="relevance-typed").value == " Paris"
    assert any(i.value.startswith("The link's token ' Paris' is not among this text's 10 likeliest") for i in
               fresh.info)
    assert any(m.value.startswith("**AttnLRP: relevance for ' Paris'") for m in fresh.markdown), [
        m.value for m in fresh.markdown][:5]
