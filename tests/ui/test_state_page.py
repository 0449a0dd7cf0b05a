"""What every page shares (pages/_common.py) under streamlit.testing: the one progress bar clears on success, on
error and on Stop; the URL holds the inputs of the last Run and nothing before it; a replaced upload waits for Run
(also when the URL a rerun carries lags behind); the tidy exports have one row per point and name their method."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.apptest_util import open_page


def _progress_script(outcome: str) -> None:
    """A page that runs one block under the progress helper, ending as `outcome` says."""
    import streamlit as st

    from interpscope.config import InterpscopeError
    from pages._common import committed, progress, request_stop, show_errors

    run = committed("work", {"n": 1}, st.button("Run", key="work-run"))
    if run is not None:
        with show_errors(), progress("Working", "work") as report:
            report(1, 3)
            if outcome == "error":
                raise InterpscopeError("the work failed")
            if outcome == "stop" and not st.session_state.get("stopped-once"):
                st.session_state["stopped-once"] = True
                request_stop("work")  # what the Stop button's click does: its callback, then a rerun that
                st.rerun()  # interrupts the work in flight, here, inside the block
            report(3, 3)
        st.write("finished")


def stop_buttons(at: AppTest) -> list:
    return [b for b in at.button if b.key == "work-stop"]


@pytest.mark.parametrize("outcome", ["success", "error"])
def test_the_progress_bar_and_its_stop_button_are_gone_when_the_work_ends(outcome):
    at = AppTest.from_function(_progress_script, args=(outcome,), default_timeout=60).run()
    at.button(key="work-run").click().run()
    assert not at.exception, at.exception
    assert not at.get("progress") and not stop_buttons(at)
    if outcome == "error":
        assert any("the work failed" in e.value for e in at.error)
    else:
        assert any("finished" in m.value for m in at.markdown)


def test_the_progress_bar_is_gone_after_stop_and_the_run_is_cleared():
    at = AppTest.from_function(_progress_script, args=("stop",), default_timeout=60).run()
    at.button(key="work-run").click().run()
    assert not at.exception, at.exception
    assert at.session_state["stopped-once"]  # the work was interrupted inside the block
    assert not at.get("progress") and not stop_buttons(at)
    assert any("Stopped" in t.value for t in at.toast)  # a passing note, not a second box beside the page's own
    assert not any("Stopped" in i.value for i in at.info)
    assert not any("finished" in m.value for m in at.markdown)
    at.button(key="work-run").click().run()  # Run again: the work runs to its end
    assert any("finished" in m.value for m in at.markdown) and not at.get("progress")


RELEVANCE = "pages/relevance.py"


@pytest.fixture
def relevance(bundled_lm):
    at = open_page(RELEVANCE)
    assert not at.exception, at.exception
    return at


def heatmaps(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="relevance-heatmap"' in m.value]


def test_the_url_holds_nothing_before_run_and_the_last_runs_inputs_after(relevance):
    at = relevance
    at.text_area(key="relevance-text").input("The cat sat on the").run()
    at.selectbox(key="relevance-method").set_value("ig").run()
    at.number_input(key="relevance-ig-steps").set_value(8).run()
    assert "text" not in at.query_params and "run" not in at.query_params and "steps" not in at.query_params
    at.button(key="relevance-run").click().run()
    params = dict(at.query_params)
    assert params["text"] == "The cat sat on the" and params["method"] == "ig" and params["steps"] == "8"
    assert params["run"] == "1"
    at.text_area(key="relevance-text").input("A pending edit").run()  # typed, not Run
    assert at.query_params["text"] == "The cat sat on the" and at.query_params["run"] == "1"
    assert any("changed since the last Run" in c.value for c in at.caption)


def test_compare_mode_uses_the_second_methods_own_options(relevance):
    from pages._common import clear_shared

    clear_shared()  # only this test's results in the shared cache
    at = relevance
    at.toggle(key="relevance-compare").set_value(True).run()
    at.selectbox(key="relevance-second").set_value("occlusion").run()
    at.number_input(key="relevance-second-window").set_value(2).run()
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    assert len(heatmaps(at)) == 2
    assert at.query_params["second_window"] == "2"
    from interpscope.relevance.methods import MethodOptions
    from pages._common import _SHARED

    occlusion = [key for key in list(_SHARED) if key[0] == "explain" and key[3] == "occlusion"]
    assert any(MethodOptions(occlusion_window=2) in key for key in occlusion)  # the second method's own options
    assert not any(MethodOptions() in key for key in occlusion)  # not the defaults


def test_a_cached_result_says_so_instead_of_repeating_the_first_runs_seconds(relevance):
    at = relevance
    at.text_area(key="relevance-text").input("Elizabeth smiled at").run()
    at.button(key="relevance-run").click().run()
    at.run()  # the same result again: from the shared cache
    header = next(m.value for m in at.markdown if m.value.startswith("**AttnLRP: relevance for"))
    assert "cached (computed earlier in" in header


def upload(at, name: str, data: bytes, mime: str):
    at.file_uploader(key="relevance-upload").set_value((name, data, mime)).run()
    assert not at.exception, at.exception


def test_a_replaced_upload_waits_for_run_even_when_the_url_lags_behind(relevance):
    at = relevance
    at.radio(key="relevance-mode").set_value("Upload a file").run()
    upload(at, "first.txt", b"She smiled at\nHe bowed to\n", "text/plain")
    at.button(key="relevance-run").click().run()
    assert ">smiled<" in heatmaps(at)[0].replace(" ", "")
    stale = dict(at.query_params)  # what a rerun racing the page's last URL write would carry
    assert stale["run"] == "1"
    at.query_params.clear()
    at.query_params.update({k: v for k, v in stale.items() if k != "run"} | {"run": "1", "text": "stale"})
    upload(at, "second.csv", b'id,text\n1,"The sun rose over the"\n', "text/csv")
    assert not heatmaps(at), "a new file was explained without Run"
    assert any("new file" in i.value for i in at.info)
    at.button(key="relevance-run").click().run()
    assert ">sun<" in heatmaps(at)[0].replace(" ", "")


def test_relevance_curves_csv_is_one_row_per_point():
    import csv
    import io

    import numpy as np

    from components.export import data_csv
    from interpscope.figures.relevance import curve_rows
    from interpscope.results import Panel

    curves = {"AttnLRP": (np.array([0.0, 0.5, 1.0]), np.array([3.0, 1.0, 0.0]), np.array([3.0, 2.5, 0.0]), 0.7),
              "CP-LRP": (np.array([0.0, 1.0]), np.array([2.0, 0.0]), np.array([2.0, 1.0]), 0.4)}
    rows = list(csv.DictReader(io.StringIO(data_csv(Panel(of="interpscope.faithfulness_comparison", part="curves",
                                                           data=curve_rows(curves))).decode())))
    assert [r["method"] for r in rows] == ["AttnLRP"] * 3 + ["CP-LRP"] * 2
    assert set(rows[0]) == {"method", "fraction_removed", "morf", "lerf", "abpc"}
    assert [float(r["morf"]) for r in rows[:3]] == [3.0, 1.0, 0.0] and float(rows[4]["lerf"]) == 1.0
    assert not any("[" in value for r in rows for value in r.values())  # no JSON arrays in cells
