"""The SAE overview and SAE training pages under streamlit.testing, on a tiny GPT-2 saved as a model folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from interpscope.sae import load_sae
from tests.apptest_util import open_page
from tests.sae_store_tiny import random_sae_folder, tiny_lm


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sae-pages")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    lm = tiny_lm()
    model_dir = root / "tiny-model"
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    sae = random_sae_folder(lm, root / "sae", d_sae=48, arch="gated")
    yield model_dir, sae
    mp.undo()


def _charts(at) -> dict[str, dict]:
    return {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
            for c in at.get("plotly_chart")}


def test_overview_evaluates_a_folder_and_shows_metrics_and_density(setup):
    from app import OTHER

    model_dir, sae = setup
    at = open_page("pages/sae_overview.py", model_choice=OTHER, model_custom=str(model_dir))
    assert not at.exception, at.exception
    assert at.title[0].value == "SAE overview"
    at.selectbox(key="sae_overview_choice").set_value("A folder on this machine…").run()
    at.text_input(key="sae_overview_path").set_value(str(sae)).run()
    at.number_input(key="sae_overview_tokens").set_value(256).run()
    at.button(key="sae_overview_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    metrics = {m.label: m.value for m in at.metric}
    assert set(metrics) >= {"L0", "FVU", "Explained variance", "Loss recovered", "Shrinkage γ"}
    dead_label = next(label for label in metrics if label.startswith("Dead"))
    assert "tok)" in dead_label  # says over how many tokens it counts
    assert 0 < float(metrics["L0"]) < 48
    density = next(spec for title, spec in _charts(at).items() if title.startswith("Feature density"))
    assert density["layout"]["xaxis"]["title"]["text"].startswith("log10")
    assert density["layout"]["yaxis"]["title"]["text"] == "number of features"
    assert any(b.label == "PNG" for b in at.get("download_button"))


def test_overview_explains_a_shape_mismatch(setup, tmp_path):
    from app import OTHER
    from interpscope.sae import SAEConfig, build_sae, save_sae

    model_dir, _ = setup
    wrong = save_sae(build_sae(SAEConfig(d_in=20, d_sae=8, hook_name="blocks.0.hook_resid_post")), tmp_path / "w")
    at = open_page("pages/sae_overview.py", model_choice=OTHER, model_custom=str(model_dir))
    at.selectbox(key="sae_overview_choice").set_value("A folder on this machine…").run()
    at.text_input(key="sae_overview_path").set_value(str(wrong)).run()
    at.button(key="sae_overview_run").click().run()
    assert not at.exception, at.exception
    assert any("expects d_in=20" in e.value for e in at.error)


def test_training_page_trains_two_saes_and_reports(setup, exports):
    from app import OTHER

    model_dir, _ = setup
    at = open_page("pages/sae_training.py", model_choice=OTHER, model_custom=str(model_dir))
    assert not at.exception, at.exception
    assert at.title[0].value == "SAE training"
    at.selectbox(key="sae_train_hook").set_value("blocks.0.hook_resid_post")
    at.number_input(key="sae_train_width").set_value(64)
    at.number_input(key="sae_train_tokens").set_value(4096)
    at.number_input(key="sae_train_cache_tokens").set_value(2000)
    at.number_input(key="sae_train_batch").set_value(256)
    at.number_input(key="sae_train_lr").set_value(0.003)
    at.number_input(key="sae_train_eval_tokens").set_value(256)
    at.text_input(key="sae_train_name").set_value("page-run").run()
    at.button(key="sae_train_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    report = at.session_state["sae_training_result"]
    assert set(report["saved"]) == {"relu-64-l5", "gated-64-l5"}
    for folder in report["saved"].values():
        assert load_sae(folder).cfg.training_tokens == 4096
        assert Path(folder).parent.name == "page-run"
    curves = _charts(at)["Training curves"]
    assert len(curves["data"]) == 2 * 3
    assert all(0 <= summary["dead_fraction"] <= 1 for summary in report["report"].values())
    from interpscope.sae.documents import training_report  # the export is the CLI's document (sae train)

    exported = exports["sae_training"]
    assert exported["schema"] == "interpscope.sae.training" and set(exported["eval"]) == set(report["saved"])
    assert exported == json.loads(json.dumps(training_report(exported["model"], "blocks.0.hook_resid_post",
                                                             report["saved"], report["report"]).to_dict()))


def test_training_page_takes_architectures_and_knobs_from_the_registry(setup):
    from app import OTHER
    from interpscope.sae import registered

    model_dir, _ = setup
    at = open_page("pages/sae_training.py", model_choice=OTHER, model_custom=str(model_dir))
    choice = at.multiselect(key="sae_train_archs")
    trainable = [cls for cls in registered() if not cls.paired]  # transcoders train with `sae sweep --target-hook`
    assert list(choice.options) == [cls.label for cls in trainable]
    assert choice.value == [cls.short_name for cls in trainable if cls.selected_by_default]
    choice.set_value([cls.short_name for cls in trainable]).run()
    assert not at.exception, at.exception
    for cls in trainable:
        box = at.number_input(key=f"sae_train_{cls.knob.kind}_{cls.short_name}")
        assert box.value == cls.knob.default and cls.label in box.label


def test_a_linked_architecture_the_page_lacks_is_named(setup):
    """archs=relu,foo in a link kept relu and dropped foo without a word. (On the module's tiny model: this
    module's data directory is fresh, where the bundled model would be converted again, ~30 s.)"""
    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import APP, ROOT

    model_dir, _ = setup
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = str(model_dir)
    at.run()  # the home page reads the model from the link
    at.query_params["archs"] = "relu,foo"
    at.switch_page(str(ROOT / "pages/sae_training.py"))
    at.run()
    assert at.title[0].value == "SAE training"
    d_model = json.loads((model_dir / "config.json").read_text())["n_embd"]
    assert at.number_input(key="sae_train_width").value == 8 * d_model  # the tiny model's default, not SmolLM2's
    assert not at.exception, at.exception
    assert at.multiselect(key="sae_train_archs").value == ["relu"]
    assert any(w.value.startswith("Ignored from the link's architectures: 'foo' (this page trains relu,")
               for w in at.warning), [w.value for w in at.warning]
