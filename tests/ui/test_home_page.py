"""The Home page through streamlit.testing: model card, prediction chart, input messages."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.apptest_util import APP, open_page


@pytest.fixture
def app(bundled_lm):
    at = open_page("pages/home.py")
    assert not at.exception, at.exception
    return at


def metric_values(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_model_card_shows_the_bundled_model(app):
    metrics = metric_values(app)
    assert metrics["Family"] == "llama"
    assert metrics["Layers"] == "30"
    assert metrics["d_model"] == "576"
    assert metrics["Vocabulary"] == "49,152"
    assert metrics["Parameters"].endswith(" M") and 130 < float(metrics["Parameters"].split()[0]) < 140


def test_prediction_chart_for_typed_text(app):
    app.text_area(key="home-text").input("The capital of France is").run()
    assert not app.exception
    charts = app.get("plotly_chart")
    assert len(charts) == 1
    import json

    spec = json.loads(charts[0].proto.spec)
    labels = spec["data"][0]["y"]
    assert labels[-1].endswith("Paris")  # bars are drawn bottom-up: the top-1 is last
    assert len(labels) == 10
    app.slider(key="home-top").set_value(5).run()
    spec = json.loads(app.get("plotly_chart")[0].proto.spec)
    assert len(spec["data"][0]["y"]) == 5


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_gets_a_message(app, text):
    app.text_area(key="home-text").input(text).run()
    assert not app.exception
    assert any("empty" in w.value for w in app.warning)
    assert len(app.get("plotly_chart")) == 0


def test_oversized_text_gets_a_message(app):
    app.text_area(key="home-text").input("word " * 3000).run()
    assert not app.exception
    assert any("tokens long" in e.value for e in app.error)


def test_unknown_model_gets_a_message(bundled_lm):
    from app import OTHER

    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["model_choice"] = OTHER
    at.session_state["model_custom"] = "no-such-org/no-such-model"
    at.run()
    assert not at.exception
    assert at.text_input(key="model_custom").value == "no-such-org/no-such-model"
    assert any("not available offline" in e.value for e in at.error)


def test_a_csv_without_a_text_column_says_which_column_it_used(app):
    app.radio(key="home-mode").set_value("Upload a file").run()
    app.file_uploader(key="home-upload").set_value(("rows.csv", b"id,sentence\n1,The capital of France is\n",
                                                    "text/csv")).run()
    assert not app.exception
    assert any("No column named 'text'" in c.value and "'sentence'" in c.value for c in app.caption)
    assert app.get("plotly_chart")


def test_the_sidebar_says_how_to_get_a_moe_or_t5_model_and_the_script_writes_both(tmp_path, bundled_lm):
    """45.16: the docs describe MoE and T5 views no bundled model reaches; the sidebar says how to get one, and the
    script it names writes two tiny (random) folders that the loader opens as those kinds, never over existing ones."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    import interpscope
    from app import DEMO_NOTE, OTHER

    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["model_choice"] = OTHER
    at.run()
    assert any(c.value == DEMO_NOTE for c in at.sidebar.caption)
    script = Path(__file__).resolve().parents[2] / "scripts" / "make_demo_models.py"
    assert "scripts/make_demo_models.py" in DEMO_NOTE and script.is_file()
    spec = importlib.util.spec_from_file_location("make_demo_models", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_demo_models(tmp_path, bundled_lm.tokenizer)  # what the script's main does after loading the model
    mixtral = interpscope.load(str(tmp_path / "tiny-mixtral"), device="cpu")
    assert mixtral.adapter.family == "mixtral"
    assert interpscope.explain_experts(mixtral, "The cat sat").to_dict()["schema"] == "interpscope.expert_relevance"
    assert interpscope.load(str(tmp_path / "tiny-t5"), device="cpu").is_encoder_decoder
    again = subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode != 0 and "Already there" in again.stderr  # refused before any model loads
