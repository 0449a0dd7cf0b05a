"""Eight browser sessions on one server at once: each sees exactly what it sees alone, and they share one model.

Sessions are streamlit.testing AppTests, each run in its own thread (as the server runs each session's script in
its own thread) on a tiny GPT-2 picked in the sidebar as a local folder, with an SAE store for it. Some sessions
edit the shared model (SAE steering and ablation, relevance rules, early-stopped encodes) while others predict.
Every page's output (texts, metrics, chart data, tables, messages) is compared with a serial run of the same
session after the shared result caches are cleared, so each concurrent session really computes.
"""
from __future__ import annotations

import json
import os
import re
import threading

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from interpscope.models import load_model
from interpscope.models.loading import cached_models
from interpscope.predict import forget_next_logits
from interpscope.sae.store import FeatureStore, build_store
from pages._common import clear_shared
from tests.apptest_util import APP, ROOT, concurrent_apptests
from tests.sae_store_tiny import isolated_data, random_sae_folder, save_tiny_lm

OTHER = "Other: Hugging Face id or local folder…"
TIMING = re.compile(r"\d+(\.\d+)?\s*s\b")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sessions")
    monkeypatch = isolated_data(root)
    model_dir = save_tiny_lm(root / "tiny-model", seed=2)
    lm = load_model(str(model_dir), device="cpu")
    sae = random_sae_folder(lm, root / "sae")
    store = FeatureStore(build_store(lm, sae, n_tokens=1024, context_size=64, batch_size=4, eval_tokens=128))
    yield model_dir, store
    monkeypatch.undo()


def sessions(model_dir, store) -> dict[str, tuple[str, dict]]:
    """name -> (page, session state before the first run)."""
    sidebar = {"model_choice": OTHER, "model_custom": str(model_dir), "device": "cpu"}
    sae = dict(sidebar, sae_store=store.name, sae_feature=int(store.density.argmax()))
    return {
        "home-france": ("pages/home.py", dict(sidebar, **{"home-text": "The capital of France is"})),
        "home-austen": ("pages/home.py", dict(sidebar, **{"home-text": "It is a truth universally acknowledged"})),
        "home-numbers": ("pages/home.py", dict(sidebar, **{"home-text": "one two three four five"})),
        "relevance-attnlrp": ("pages/relevance.py", dict(sidebar, **{"relevance-method": "attnlrp"})),
        "relevance-cplrp": ("pages/relevance.py", dict(sidebar, **{"relevance-method": "cplrp"})),
        "sae-prompt": ("pages/sae_features.py", dict(sae, sae_view="Prompt")),
        "sae-steer-add": ("pages/sae_features.py", dict(sae, sae_view="Steering", **{"sae-steer-strength": 300.0})),
        "sae-steer-ablate": ("pages/sae_features.py", dict(sae, sae_view="Steering", **{"sae-steer-mode": "ablate"})),
    }


def run_session(page: str, state: dict) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(str(ROOT / page))
    at.query_params["run"] = "1"  # as a shared link that ran: pages that wait for Run compute on open
    return at.run()


def snapshot(at: AppTest) -> dict:
    """What the page shows, with wall-clock timings blanked."""
    def clean(text: str) -> str:
        return TIMING.sub("<t>", text)

    charts = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        charts.append({"data": spec.get("data"), "title": clean(json.dumps(spec.get("layout", {}).get("title")))})
    return {
        "exceptions": [str(e.value) for e in at.exception],
        "errors": [e.value for e in at.error],
        "warnings": [w.value for w in at.warning],
        "markdown": [clean(m.value) for m in at.markdown],
        "metrics": [(m.label, clean(m.value)) for m in at.metric if m.label != "Load time"],
        "charts": charts,
        "tables": [d.value.to_json() for d in at.dataframe],
        "html": [clean(h.proto.body) for h in at.get("html")],
    }


def test_eight_concurrent_sessions_match_serial_runs_and_share_one_model(env):
    model_dir, store = env
    plan = sessions(model_dir, store)
    serial = {}
    for name, (page, state) in plan.items():
        serial[name] = snapshot(run_session(page, state))
        assert not serial[name]["exceptions"] and not serial[name]["errors"], (name, serial[name])
        drawn = serial[name]["charts"] or any("<span" in m for m in serial[name]["markdown"])
        assert drawn, f"{name} drew nothing"

    for round_ in range(2):
        st.cache_data.clear()  # and every other cache shared across sessions: each session really computes
        clear_shared()
        forget_next_logits()
        concurrent: dict[str, dict] = {}
        failures: list[str] = []
        start = threading.Barrier(len(plan))

        def work(name: str, page: str, state: dict, start: threading.Barrier, concurrent: dict[str, dict],
                 failures: list[str]) -> None:
            try:
                start.wait()
                concurrent[name] = snapshot(run_session(page, state))
            except BaseException as err:  # noqa: BLE001 - reported below
                failures.append(f"{name}: {err!r}")

        threads = [threading.Thread(target=work, args=(name, *spec, start, concurrent, failures))
                   for name, spec in plan.items()]
        with concurrent_apptests():
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=600)
        assert not failures, failures
        for name in plan:
            assert concurrent[name] == serial[name], f"round {round_}: session {name} differs from its serial run"

    copies = [e for e in cached_models() if e["key"][0] == os.path.realpath(model_dir)]
    assert len(copies) == 1


# --- real page loads on one server (issue 22, item 14) ---------------------------------------------------------
LOADED_PAGES = ["", "relevance-maps", "information-flow", "sae-metrics", "feature-browser", "train-sae", "neurons",
                "numbers-fourier"]
ERROR_TEXT = ("Something went wrong", "SystemError", "Traceback", "recursion depth mismatch")


def page_problems(page) -> list[str]:
    """Exceptions, error messages and error text in a loaded page."""
    found = [f"exception: {e.inner_text()[:200]}" for e in page.locator("[data-testid='stException']").all()]
    found += [f"error: {e.inner_text()[:200]}" for e in page.locator("[data-testid='stAlertContentError']").all()]
    text = page.locator("[data-testid='stApp']").inner_text()
    return found + [f"text: {marker}" for marker in ERROR_TEXT if marker in text]


def test_eight_concurrent_page_loads_repeated_show_no_error(app_server, browser):
    """Eight pages opened at once in eight browser sessions on one server, three rounds; every page finishes with
    its title and no exception, error message or error text (a SystemError from Streamlit's magic rewriting of a
    page's source was seen once in 44 sessions with magic on: it is off, see scripts/serve_app.py)."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tabs = [context.new_page() for _ in LOADED_PAGES]
    try:
        for round_ in range(3):
            for tab, path in zip(tabs, LOADED_PAGES, strict=True):
                tab.goto(f"{app_server}/{path}?model=adder", wait_until="commit")
            for tab, path in zip(tabs, LOADED_PAGES, strict=True):
                tab.locator("[data-testid='stMain'] h1").first.wait_for(timeout=120_000)
                tab.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                      timeout=120_000)
                assert not page_problems(tab), (round_, path or "home", page_problems(tab))
    finally:
        context.close()


def test_no_page_relies_on_streamlit_magic():
    """With runner.magicEnabled off (the served and tested configuration), a bare expression in a page would no
    longer render: every page writes what it shows explicitly."""
    import ast

    from streamlit.runtime.scriptrunner import magic

    scripts = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    for script in scripts:
        tree = magic.add_magic(script.read_text(encoding="utf-8"), str(script))
        written = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and isinstance(node.value, ast.Name) and node.value.id == magic.MAGIC_MODULE_NAME]
        assert not written, f"{script.name} lines {written} render only through Streamlit magic"
    assert len(scripts) > 8


def test_served_and_tested_apps_run_with_magic_off():
    from streamlit import config

    from tests.ui.test_serving import load_serve_app

    assert "--runner.magicEnabled=false" in load_serve_app().streamlit_args([])
    assert config.get_option("runner.magicEnabled") is False  # AppTests here (tests/conftest.py)
