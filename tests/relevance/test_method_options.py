"""Methods declare their own options (interpscope.relevance.options): a method registered here, with an option of its
own, gets its widget on the relevance page (first method, compare mode, whole file), its URL parameter and its
`interpscope explain` flag, and runs with the value given; no page or command types a built-in method's name."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from interpscope.config import InterpscopeError
from interpscope.relevance.methods import (
    METHODS,
    Method,
    MethodOptions,
    OptionSpec,
    option_specs,
    register_method,
    rule_methods,
)
from tests.apptest_util import ROOT, open_page

NAME = "scaled_gradient"
SCALE = OptionSpec("gradient_scale", float, 1.0, "Gradient scale", "multiplies the Gradient x Input map",
                   low=0.0, high=100.0, url="gscale")
SEEN: list[float] = []  # the scale each run of the test method was given


def _scaled(adapter, ids, target, latent, options, progress=None):
    SEEN.append(options.gradient_scale)
    plain = next(m for m in METHODS.values() if m.kind == "gradient" and m.name != NAME)
    result = plain.compute(adapter, ids, target, latent, options)
    return dataclasses.replace(result, relevance=result.relevance * options.gradient_scale)


@pytest.fixture
def scaled():
    SEEN.clear()
    method = register_method(Method(NAME, "Scaled gradient (test)", "gradient", "Gradient x Input times a scale.",
                                    frozenset(), _scaled, options=(SCALE,)))
    yield method
    METHODS.pop(NAME, None)


@pytest.fixture
def tiny_model(tmp_path, monkeypatch) -> Path:
    from tests.sae_store_tiny import save_tiny_lm

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return save_tiny_lm(tmp_path / "model", seed=3)


# --- the options as data ------------------------------------------------------------------------------------------

def test_options_read_defaults_compare_by_what_differs_and_survive_a_pickle():
    import pickle

    assert MethodOptions(ig_steps=32) == MethodOptions() and hash(MethodOptions(ig_steps=32)) == hash(MethodOptions())
    options = MethodOptions(ig_steps=8, baseline="pad")
    assert options.ig_steps == 8 and options["baseline"] == "pad" and options.occlusion_window == 1
    assert options != MethodOptions(ig_steps=8) and options.replace(baseline="zero") == MethodOptions(ig_steps=8)
    assert pickle.loads(pickle.dumps(options.replace(pad_token_id=3))) == options.replace(pad_token_id=3)
    assert options.to_dict() == {"ig_steps": 8, "baseline": "pad", "occlusion_window": 1, "pad_token_id": None}
    with pytest.raises(AttributeError):
        _ = options.no_such_option


@pytest.mark.parametrize("options, message", [
    (MethodOptions(ig_steps=0), "IG steps must be an integer from 1 to 512 (got 0)."),
    (MethodOptions(ig_steps=2.5), "IG steps must be an integer from 1 to 512 (got 2.5)."),
    (MethodOptions(baseline="noise"), "Unknown baseline 'noise': choose one of zero, pad, mean."),
    (MethodOptions(occlusion_window=65), "The occlusion window must be an integer from 1 to 64 tokens (got 65)."),
    (MethodOptions(ig_stesp=8), "Unknown method option 'ig_stesp'"),
])
def test_bad_values_get_a_message_naming_the_option_its_rule_and_the_value(options, message):
    with pytest.raises(InterpscopeError, match=re.escape(message)):
        options.checked()


def test_a_shared_option_must_be_the_same_spec(scaled):
    clash = OptionSpec("gradient_scale", int, 1, "Another scale")
    with pytest.raises(ValueError, match="gradient_scale"):
        register_method(Method("clashing", "Clashing", "gradient", "", frozenset(), _scaled, options=(clash,)))
    assert "clashing" not in METHODS
    assert option_specs()["gradient_scale"] is SCALE
    assert MethodOptions(gradient_scale=250.0).get("gradient_scale") == 250.0
    with pytest.raises(InterpscopeError, match=re.escape("Gradient scale must be a number from 0 to 100")):
        MethodOptions(gradient_scale=250.0).checked()


def test_rule_methods_are_the_registered_methods_with_lrp_rules_the_model_serves():
    from interpscope.adapters import get_adapter
    from tests.tiny import tiny_llama

    adapter = get_adapter(tiny_llama(seed=3))
    assert [m.name for m in rule_methods(adapter)] == [m.name for m in METHODS.values()
                                                        if m.rules is not None and m.serves(adapter)]
    assert all(m.kind == "lrp" for m in rule_methods()) and len(rule_methods()) > len(rule_methods(adapter))


# --- the test method on the relevance page and the command line ---------------------------------------------------

def test_a_registered_method_gets_its_control_and_url_on_the_relevance_page_and_runs_with_it(scaled, tiny_model):
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(tiny_model))
    assert not at.exception, at.exception
    assert "Scaled gradient (test)" in at.selectbox(key="relevance-method").options
    at.selectbox(key="relevance-method").set_value(NAME).run()
    widget = at.number_input(key="relevance-gradient-scale")
    assert widget.label == "Gradient scale" and widget.value == 1.0
    widget.set_value(2.5).run()
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    assert SEEN == [2.5]
    assert at.query_params["method"] == NAME and at.query_params["gscale"] == "2.5"

    # compare mode: the second method has its own copy of the control, and its own URL parameter
    at.selectbox(key="relevance-method").set_value("gradxinput").run()
    at.toggle(key="relevance-compare").set_value(True).run()
    at.selectbox(key="relevance-second").set_value(NAME).run()
    at.number_input(key="relevance-second-gradient-scale").set_value(4.0).run()
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    assert SEEN[-1] == 4.0 and at.query_params["second_gscale"] == "4.0"


def test_a_registered_method_gets_its_control_in_the_whole_file_view(scaled, tiny_model):
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(tiny_model))
    rows = b"text\nThe capital of France is\nShe smiled at him and\n"
    at.file_uploader(key="relevance-file-upload").set_value(("rows.csv", rows, "text/csv")).run()
    at.selectbox(key="relevance-file-method").set_value(NAME).run()
    at.number_input(key="relevance-file-gradient-scale").set_value(3.0).run()
    at.button(key="relevance-file-run").click().run()
    assert not at.exception, at.exception
    assert SEEN == [3.0, 3.0]  # both rows, with the value given


def test_a_registered_method_gets_its_flag_in_explain_help_and_runs_with_the_value(scaled, tiny_model, capsys):
    from interpscope.cli import main
    from interpscope.models import load_model
    from interpscope.relevance.api import explain

    assert main(["explain", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--gradient-scale" in help_text and NAME in help_text
    assert "--ig-steps" in help_text and "--baseline" in help_text and "--occlusion-window" in help_text
    text = "The cat sat on the"
    assert main(["explain", "--model", str(tiny_model), "--text", text, "--method", NAME, "--gradient-scale", "2.5",
                 "--json", "-"]) == 0
    assert SEEN == [2.5]
    document = json.loads(capsys.readouterr().out)
    plain = explain(load_model(str(tiny_model)), text, "gradxinput")
    np.testing.assert_allclose(document["relevance"], 2.5 * np.asarray(plain.relevance), rtol=1e-5, atol=1e-7)
    assert main(["explain", "--model", str(tiny_model), "--text", text, "--method", NAME,
                 "--gradient-scale", "500"]) == 2
    assert "Gradient scale must be a number from 0 to 100 (got 500.0)." in capsys.readouterr().err


# --- no page or command types a built-in method's name -----------------------------------------------------------

def quoted_method_names(source: str, names: list[str]) -> list[str]:
    """The method names written as a quoted string literal in `source` ("ig", 'occlusion')."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(r"""(["'])(""" + alternatives + r""")\1""")
    return [match.group(0) for match in pattern.finditer(source)]


def test_the_name_check_finds_a_typed_name():
    names = list(METHODS)
    assert quoted_method_names('if method in ("ig", "occlusion"):', names) == ['"ig"', '"occlusion"']
    assert quoted_method_names("choices=['attnlrp', 'cplrp']", names) == ["'attnlrp'", "'cplrp'"]
    assert quoted_method_names('key=f"{key}-ig-steps", "relevance-method", "signal"', names) == []


def test_no_page_or_command_types_a_built_in_method_name():
    names = list(METHODS)  # the shipped methods (interpscope.relevance.builtin)
    assert {"attnlrp", "cplrp", "mambalrp", "gradxinput", "ig", "occlusion"} <= set(names)
    found = {}
    for folder in (ROOT / "pages", ROOT / "backend" / "interpscope" / "cli"):
        for path in sorted(folder.rglob("*.py")):
            hits = quoted_method_names(path.read_text(encoding="utf-8"), names)
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert not found, f"method names typed outside the registry (ask the registry by property instead): {found}"
