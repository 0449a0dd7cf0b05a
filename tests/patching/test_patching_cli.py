"""`interpscope patch`, the Activation patching page and `interpscope.patch`: one document; bad pairs refused with
the reason (exit 2); patching in one thread never reaches another thread's predictions; the bundled model's final
residual restores the clean metric."""
from __future__ import annotations

import json

import numpy as np
import pytest

import interpscope
from interpscope.cli import main
from interpscope.patching.attribution import DEFAULT_RELP_RULES
from interpscope.results import without_timings
from tests.models.test_isolation import race
from tests.sae_store_tiny import save_tiny_lm, tiny_lm

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save_tiny_lm(tmp_path_factory.mktemp("tiny") / "gpt2"))


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_prompts_of_different_lengths_exit_2_with_both_tokenisations(capsys, folder, tmp_path):
    out = tmp_path / "never.json"
    code, _, err = run_cli(capsys, "patch", "--model", folder, "--device", "cpu", "--clean", CLEAN, "--corrupt",
                           CORRUPT.replace("Mary gave", "Maryanne gave"), "--json", str(out))
    assert code == 2 and not out.exists()
    assert "different lengths" in err and "clean 15 tokens" in err and "corrupt 16 tokens" in err and "'anne'" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--answer", " Maryanne Smith"], "The answer: ' Maryanne Smith' is"),
    (["--components", "resid,neurons"], "Unknown components 'neurons'"),
    (["--method", "real,ig"], "Unknown methods 'ig'"),
    (["--path", "L1.attn", "L0.mlp"], "must come later"),
])
def test_bad_requests_exit_2_with_one_line(capsys, folder, argv, message):
    code, _, err = run_cli(capsys, "patch", "--model", folder, "--device", "cpu", "--clean", CLEAN, "--corrupt",
                           CORRUPT, "--method", "atp", *argv)
    assert code == 2 and message in err, err


def test_the_cli_document_is_the_api_document(capsys, folder):
    code, out, err = run_cli(capsys, "patch", "--model", folder, "--device", "cpu", "--clean", CLEAN, "--corrupt",
                             CORRUPT, "--answer", " Mary", "--wrong", " John", "--components", "resid,heads",
                             "--json", "-")
    assert code == 0, err
    document = json.loads(out)
    lm = interpscope.load(folder, device="cpu")
    api = interpscope.patch(lm, CLEAN, CORRUPT, answer=" Mary", wrong=" John", components="resid,heads")
    assert without_timings(document) == without_timings(api.to_dict())
    assert document["schema"] == "interpscope.patching" and document["methods"] == ["real", "atp", "relp"]
    assert document["relp_rules"] == DEFAULT_RELP_RULES == "relp-half-q-ig2"  # the CLI's and the API's default are one
    assert document["grids"]["resid"]["real"][-1][-1] == pytest.approx(1.0, abs=1e-4)
    assert {"atp", "relp", "cells", "chance_r95"} <= set(document["agreement"]["heads"])
    assert document["bos_prepended"] and document["sinks"][0]["prepended"]
    code, out, err = run_cli(capsys, "patch", "--model", folder, "--device", "cpu", "--clean", CLEAN, "--corrupt",
                             CORRUPT, "--answer", " Mary", "--wrong", " John", "--path", "L0.mlp", "logits",
                             "--json", "-")
    assert code == 0, err
    path = json.loads(out)
    assert path["schema"] == "interpscope.path_patching" and path["receiver"] == "logits"
    api_path = interpscope.path_patch(lm, CLEAN, CORRUPT, "L0.mlp", "logits", answer=" Mary", wrong=" John")
    assert without_timings(path) == without_timings(api_path.to_dict())


def test_patching_in_one_thread_never_reaches_another_threads_predictions():
    lm = tiny_lm(seed=3)

    def once() -> None:
        result = interpscope.patch(lm, CLEAN, CORRUPT, answer=" Mary", wrong=" John", components="resid,heads",
                                   methods="real,relp")
        assert np.abs(np.asarray(result.grids["heads"]["real"])).max() > 0  # the edits did act in this thread
        interpscope.path_patch(lm, CLEAN, CORRUPT, "L0.H1", "L1.attn", answer=" Mary", wrong=" John")

    wrong, total, edits = race(lm, once, text=CLEAN)
    assert edits >= 1 and wrong == 0, f"{wrong} of {total} predictions changed while patching ran"


@pytest.mark.bundled
def test_bundled_page_cli_and_api_give_one_document(capsys, exports, bundled_lm):
    from interpscope.capture import model_lock
    from interpscope.patching.patching import Cell
    from interpscope.patching.paths import patched_together
    from interpscope.patching.run import prepare
    from tests.apptest_util import open_page

    argv = ["--clean", CLEAN, "--corrupt", CORRUPT, "--answer", " Mary", "--wrong", " John", "--components",
            "resid,attn", "--method", "atp,relp"]
    code, out, err = run_cli(capsys, "patch", *argv, "--json", "-")
    assert code == 0, err
    cli = json.loads(out)
    at = open_page("pages/patching.py", **{"patch-components-pick": ["resid", "attn"],
                                           "patch-methods-pick": ["atp", "relp"]})
    at.button(key="patch-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.patch(bundled_lm, CLEAN, CORRUPT, answer=" Mary", wrong=" John", components="resid,attn",
                            methods="atp,relp").to_dict()
    assert without_timings(cli) == without_timings(exports["patch-resid"]) == without_timings(api)
    assert cli["clean_value"] > 0 > cli["corrupt_value"]  # SmolLM2 does the IOI task on this pair
    at.text_area(key="patch-corrupt").input(CORRUPT.replace("Mary gave", "Maryanne Smith gave"))
    at.button(key="patch-run").click().run()
    assert not at.exception and any("different lengths" in e.value for e in at.error), [e.value for e in at.error]
    assert cli["sinks"][0]["position"] == 0 and cli["sinks"][0]["prepended"]
    with model_lock(bundled_lm):  # the final residual at the last position carries the whole clean metric
        ready = prepare(bundled_lm, CLEAN, CORRUPT, "logit-diff", " Mary", " John", None)
        last = ready.pair.n_tokens - 1
        value = patched_together(bundled_lm.adapter, ready.pair.corrupt_ids, ready.metric, ready.clean,
                                 [Cell("resid", bundled_lm.adapter.n_layers, last)])
    assert value == pytest.approx(ready.clean_value, abs=1e-4)


def test_link_components_and_methods_the_page_lacks_are_named(bundled_lm):
    """components=resid,foo&methods=nope in a link kept resid and dropped the rest without a word."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import APP, ROOT

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"components": "resid,foo", "methods": "nope"})
    at.switch_page(str(ROOT / "pages/patching.py"))
    at.run()
    assert not at.exception, at.exception
    assert at.multiselect(key="patch-components-pick").value == ["resid"]
    assert at.multiselect(key="patch-methods-pick").value == []
    notes = [w.value for w in at.warning]
    assert any(n.startswith("Ignored from the link's components: 'foo' (this page has resid,") for n in notes), notes
    assert any(n.startswith("Ignored from the link's methods: 'nope'") for n in notes), notes
