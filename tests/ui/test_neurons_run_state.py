"""Entropy neurons' "Your text" waits for an explicit Run (issue 45, item 12): opening the view ran the model on the
default text. (Its own module: the tiny model's fixture points the data directory elsewhere than the SAE store's.)"""
from __future__ import annotations

from tests.apptest_util import open_page
from tests.ui.test_neurons_page import tiny_folder  # noqa: F401  (a saved tiny model with MLP neurons)
from tests.ui.test_run_progress_state import Calls, infos


def test_entropy_your_text_waits_for_run(tiny_folder, monkeypatch):  # noqa: F811
    import interpscope.entropy_neurons.cards as neurons  # where the page takes it from on every run
    from app import OTHER
    from pages._common import clear_shared

    clear_shared()
    calls = Calls(neurons.text_activations)
    monkeypatch.setattr(neurons, "text_activations", calls)
    at = open_page("pages/entropy_neurons.py", model_choice=OTHER, model_custom=str(tiny_folder),
                   **{"en-store-tokens": 256})
    at.segmented_control(key="en-view").set_value("Your text").run()
    assert not at.exception, at.exception
    assert not calls.calls, "Your text ran the model on opening the view"
    assert any("Press **Run**" in i for i in infos(at))
    at.button(key="en-text-run").click().run()
    assert not at.exception, at.exception
    assert len(calls.calls) == 1 and any("top prediction" in df.value.columns for df in at.dataframe)
