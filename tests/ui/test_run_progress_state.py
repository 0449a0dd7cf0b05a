"""Progress, Run and Stop (issue 45, item 12): the SAE browser's Prompt view waits for an explicit Run (Entropy
neurons' "Your text": test_neurons_run_state); the long runs (graph Intervene, information flow, SAE steering) show
the one progress bar with a Stop, and a Stop leaves one box (the page's own), not two; the bench's bar names its
stage; no page promises a fixed duration (under load they were 10-20x off): the bars estimate from their pace."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.apptest_util import ROOT, open_page
from tests.ui.test_graph_page import llama_folder, open_graph  # noqa: F401  (a tiny Llama and random transcoders)
from tests.ui.test_sae_browser_page import env, open_browser  # noqa: F401  (a tiny store)

FIXED_DURATION = re.compile(
    r"\babout (a|one|two|a few|\d[\d.,]*)[\s-]*(seconds?|s|minutes?)\b|~\s?\d[\d.]*\s?s\b|\d+\s?[–-]\s?\d+\s?s\b"
    r"|\b(a few|several) (seconds|minutes)\b|\bof CPU per\b|\b(seconds?|minutes?) on (the|a)\b")


def ui_strings(path: Path) -> list[str]:
    """The string literals of a page file that a visitor can read (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_no_page_promises_a_fixed_duration():
    files = [*sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "components").glob("*.py")), ROOT / "app.py"]
    found = [f"{path.name}: {text!r}" for path in files for text in ui_strings(path) if FIXED_DURATION.search(text)]
    assert not found, found


def test_the_pattern_finds_the_hints_it_is_for():  # the check above can fail
    for hint in ("(about a second on the bundled model)", "about 10–60 s on the", "~30 s", "about 6 s of CPU",
                 "a few seconds on the bundled model", "several minutes on a CPU"):
        assert FIXED_DURATION.search(hint), hint
    assert not FIXED_DURATION.search("one forward pass per changed cell; 12 tokens")


class Calls:
    """A stand-in for a backend function: counts calls, records what the page gave it, and can simulate the Stop
    button's click in the middle of the work (its callback, then the rerun that interrupts the work)."""

    def __init__(self, real, page: str | None = None, stop_first: bool = False) -> None:
        self.real, self.page, self.stop_first = real, page, stop_first
        self.calls: list[dict] = []

    def __call__(self, *args, **kwargs):
        from pages._common import request_stop

        seen = {"progress": kwargs.get("progress"), "stop": self.page is not None and f"{self.page}-stop" in
                st.session_state}
        self.calls.append(seen)
        report = kwargs.get("progress")
        if report is not None:
            report(0.5, "halfway") if self.page != "sae-steer" else report(1, 2)
        if self.stop_first and len(self.calls) == 1:
            request_stop(self.page)  # what the Stop button's click does
            st.rerun()
        return self.real(*args, **kwargs)


def infos(at: AppTest) -> list[str]:
    return [i.value for i in at.info]


def test_the_sae_prompt_view_waits_for_run(env, monkeypatch):  # noqa: F811
    import pages._sae_models as models

    st.cache_data.clear()  # the view's cache: a result from another test would hide a computation
    calls = Calls(models.prompt_features)
    monkeypatch.setattr(models, "prompt_features", calls)
    store, _, _ = env
    at = open_browser(store, "Prompt")
    assert not calls.calls, "the Prompt view ran the model on open"
    assert not at.get("plotly_chart") and any("Press **Run**" in i for i in infos(at))
    at.button(key="sae-prompt-run").click().run()
    assert len(calls.calls) == 1 and at.get("plotly_chart")
    at.slider(key="sae-prompt-top").set_value(7).run()  # the heatmap's size is a view of the Run
    assert len(calls.calls) == 1 and at.query_params["top"] == "7"
    assert "Top 7 features on the prompt" in at.get("plotly_chart")[0].proto.spec


def test_steering_shows_a_bar_with_stop_and_a_stop_leaves_one_box(env, monkeypatch):  # noqa: F811
    import pages._sae_live as live
    from pages._common import clear_shared

    clear_shared()
    calls = Calls(live.steer, page="sae-steer", stop_first=True)
    monkeypatch.setattr(live, "steer", calls)
    store, _, _ = env
    at = open_browser(store, "Steering", 3)
    at.slider(key="sae-steer-new").set_value(2).run()
    at.button(key="sae-steer-run").click().run()
    assert not at.exception, at.exception
    assert calls.calls[0]["progress"] is not None and calls.calls[0]["stop"]  # a bar with a Stop while it ran
    assert not any("Clean continuation" in m.value for m in at.markdown)  # stopped: nothing half-shown
    assert infos(at) == ["Press **Run** to generate the clean and the edited continuation."], infos(at)  # one box
    assert any("Stopped" in t.value for t in at.toast)
    at.button(key="sae-steer-run").click().run()  # Run again: it runs to its end
    assert not at.exception, at.exception
    assert any("Clean continuation" in m.value for m in at.markdown)


@pytest.mark.bundled
def test_information_flow_shows_a_bar_with_stop_and_a_stop_leaves_one_box(bundled_lm, monkeypatch):
    flow = importlib.import_module("interpscope.flow.information")  # where the page takes it from on every run
    from pages._common import clear_shared

    clear_shared()
    calls = Calls(flow.information_flow, page="flow", stop_first=True)
    monkeypatch.setattr(flow, "information_flow", calls)
    at = open_page("pages/flow.py")
    at.text_area(key="flow-text").input("The capital of France is").run()
    at.button(key="flow-run").click().run()
    assert not at.exception, at.exception
    assert calls.calls[0]["progress"] is not None and calls.calls[0]["stop"]
    assert len(infos(at)) == 1 and infos(at)[0].startswith("Press **Run**"), infos(at)
    assert any("Stopped" in t.value for t in at.toast) and not at.get("plotly_chart")
    at.button(key="flow-run").click().run()
    assert not at.exception, at.exception
    assert at.get("plotly_chart")


def test_graph_intervene_shows_a_bar_with_stop(llama_folder, exports, monkeypatch):  # noqa: F811
    import interpscope.graphs.interventions as graphs  # where the page takes it from on every run

    calls = Calls(graphs.intervene, page="graph-intervene", stop_first=True)
    monkeypatch.setattr(graphs, "intervene", calls)
    at = open_graph(llama_folder)
    at.button(key="graph-run").click().run()
    features = [n["id"] for n in exports["graph"]["nodes"] if n["kind"] == "feature"][:1]
    at.session_state["_graph-selected"] = list(features)  # a selection, as the figure's event reports it
    at.run()
    at.button(key="graph-intervene").click().run()
    assert not at.exception, at.exception
    assert calls.calls[0]["progress"] is not None and calls.calls[0]["stop"]
    assert "graph-intervention" not in exports and any("Stopped" in t.value for t in at.toast)
    assert at.session_state["_committed-graph"] is not None  # the Stop ended the intervention, not the graph's Run
    at.button(key="graph-intervene").click().run()
    assert not at.exception, at.exception
    assert exports["graph-intervention"]["nodes"] == features


def test_the_bench_bar_names_each_stage_not_starting(monkeypatch):
    from streamlit.delta_generator import DeltaGenerator

    import pages._sae_bench as bench
    from interpscope.config import InterpscopeError
    from pages._common import clear_shared

    clear_shared()
    shown: list[str] = []
    real_progress = DeltaGenerator.progress

    def recording(self, value, text=None, **kwargs):
        shown.append(text or "")
        return real_progress(self, value, text=text, **kwargs)

    def fake_bench(lm, path, metric_names=(), progress=None):
        progress(0.25, "absorption: words 3/12")
        progress(0.75, "probing: passages 9/12")
        raise InterpscopeError("the fake bench ends here")

    monkeypatch.setattr(DeltaGenerator, "progress", recording)
    monkeypatch.setattr(bench, "bench_sae", fake_bench)
    at = open_page("pages/sae_overview.py")
    at.button(key="sae_bench_run").click().run()
    assert not at.exception, at.exception
    bars = [t for t in shown if t.startswith("Bench")]
    assert bars[0] == "Bench: starting", bars
    assert [t.split(" · ")[0] for t in bars[1:]] == ["Bench: absorption: words 3/12", "Bench: probing: passages 9/12"]
