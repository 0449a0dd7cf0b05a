"""The SAE feature browser page under streamlit.testing: every view, navigation, search, empty and oversized input.

The store is built for a tiny GPT-2 saved as a local model folder (so the page can load it by name) with a random
SAE, in a temporary data directory; shipped stores are hidden so the page sees exactly this one.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from interpscope.models import load_model
from interpscope.sae.store import FeatureStore, build_store
from tests.apptest_util import ROOT
from tests.sae_store_tiny import isolated_data, random_sae_folder, tiny_lm

PAGE = "pages/sae_features.py"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """(store, model folder, SAE folder) with INTERPSCOPE_DATA_DIR pointing at a fresh directory."""
    root = tmp_path_factory.mktemp("browser")
    monkeypatch = isolated_data(root)
    model_dir = root / "tiny-model"
    tiny = tiny_lm()
    tiny.model.save_pretrained(model_dir)
    tiny.tokenizer.save_pretrained(model_dir)
    lm = load_model(str(model_dir), device="cpu")
    sae = random_sae_folder(lm, root / "sae")
    store = FeatureStore(build_store(lm, sae, n_tokens=2048, context_size=64, batch_size=4, eval_tokens=256))
    yield store, model_dir, sae
    monkeypatch.undo()


def run_page(**state) -> AppTest:
    """The page on its own (the sidebar's defaults: device auto, float32); navigation is covered in the browser."""
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def open_browser(store, view: str | None = None, feature: int | None = None, **more) -> AppTest:
    state = {"sae_store": store.name, "model_name": store.spec["model_name"], **more}  # the sidebar's model
    if view:
        state["sae_view"] = view
    if feature is not None:
        state["sae_feature"] = feature
    at = run_page(**state)
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_overview_metrics_density_and_table(env):
    store, _, _ = env
    at = open_browser(store)
    shown = metrics(at)
    assert shown["Features"] == "48"
    dead = int((store.density == 0).sum())
    assert shown[f"Dead ({dead / store.d_sae:.1%})"] == f"{dead:,}"
    assert shown["Dense"] == str(int((store.density > 0.1).sum()))
    assert shown["L0"] == f"{store.manifest['metrics']['l0']:.1f}"
    charts = at.get("plotly_chart")
    spec = json.loads(charts[0].proto.spec)
    assert sum(spec["data"][0]["y"]) == int((store.density > 0).sum())
    assert "log10 density" in spec["layout"]["xaxis"]["title"]["text"]
    table = at.dataframe[-1].value
    assert len(table) == 48 and list(table["feature"]) == list(range(48))
    np.testing.assert_allclose(table["density"], store.density)


def test_search_views(env):
    store, _, _ = env
    at = open_browser(store)
    at.radio(key="sae_search_kind").set_value("Feature id").run()
    at.text_input(key="sae_search_query").input("#5").run()
    assert not at.exception
    assert list(at.dataframe[0].value["feature"]) == [5]
    token = store.card(9).top_logits[0].token
    at.radio(key="sae_search_kind").set_value("Token in top logits").run()
    at.text_input(key="sae_search_query").input(token).run()
    assert 9 in list(at.dataframe[0].value["feature"])
    at.radio(key="sae_search_kind").set_value("Word in top contexts").run()
    at.text_input(key="sae_search_query").input("qqzzxxq").run()
    assert any("No feature has 'qqzzxxq' in its top contexts" in i.value for i in at.info)
    at.radio(key="sae_search_kind").set_value("Token in top logits").run()
    at.text_input(key="sae_search_query").input("qqzzxxq").run()
    assert any("is not a token of this model's vocabulary" in i.value for i in at.info)
    label_word = store.labels[9].split("'")[1].strip() or store.labels[9].split("'")[3].strip()
    at.radio(key="sae_search_kind").set_value("Label or explanation").run()
    at.text_input(key="sae_search_query").input(label_word).run()
    found = at.dataframe[0].value
    assert 9 in list(found["feature"]) and {"label", "snippet"} <= set(found.columns)
    assert all(label_word.lower() in label.lower() for label in found["label"])
    at.text_input(key="sae_search_query").input("x" * 500).run()
    assert any("limit is 100" in w.value for w in at.warning)
    at.radio(key="sae_search_kind").set_value("Feature id").run()
    at.text_input(key="sae_search_query").input("99999").run()
    assert any("0 to 47" in w.value for w in at.warning)
    at.text_input(key="sae_search_query").input("   ").run()
    assert not at.exception and len(at.dataframe) == 1  # only the feature table


def test_feature_page_navigation(env):
    store, _, _ = env
    at = open_browser(store, "Feature", 4)
    card = store.card(4)
    shown = metrics(at)
    assert shown["Max activation"] == f"{card.max_activation:.4g}"
    assert shown["Tokens it fires on"] == f"{card.fire_count:,}"
    html = " ".join(h.proto.body for h in at.get("html"))
    assert html.count("<tr>") >= len(card.top_contexts)
    assert "feature=4" in " ".join(m.value for m in at.markdown)
    assert at.query_params["feature"] == "4" and at.query_params["view"] == "Feature"
    at.button(key="sae-next").click().run()
    assert at.session_state["sae_feature"] == 5 and at.query_params["feature"] == "5"
    at.button(key="sae-prev").click().run()
    at.button(key="sae-prev").click().run()
    assert at.session_state["sae_feature"] == 3
    neighbour = store.card(3).neighbours[0].feature
    at.button(key="sae-neighbour-0").click().run()
    assert at.session_state["sae_feature"] == neighbour
    at.button(key="sae-random").click().run()
    assert not at.exception and 0 <= at.session_state["sae_feature"] < 48
    at.number_input(key="sae_feature").set_value(47).run()
    at.button(key="sae-next").click().run()
    assert at.session_state["sae_feature"] == 47  # clamped at the last feature
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert any("activations when > 0" in t for t in titles) and any("logit weights" in t for t in titles)


def test_permalink_query_parameters_open_the_feature(env):
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params["store"] = store.name
    at.query_params["view"] = "Feature"
    at.query_params["feature"] = "11"
    at.run()
    assert not at.exception
    assert at.session_state["sae_feature"] == 11 and at.session_state["sae_view"] == "Feature"
    assert metrics(at)["Max activation"] == f"{store.card(11).max_activation:.4g}"


@pytest.mark.parametrize("view, param, key", [("Feature", "feature", "sae_feature"),
                                               ("Attribution", "attr_feature", "sae-attr-feature"),
                                               ("Steering", "steer_feature", "sae-steer-feature")])
def test_a_linked_feature_the_store_lacks_is_named_not_changed_silently(env, view, param, key):
    """A link to feature 99999999 of a store with fewer features opens the last one and says so; before, the views
    clamped it without a word (the Circuit view, which needs a second store, is checked in test_circuits)."""
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": view, param: "99999999"})
    at.run()
    assert not at.exception, at.exception
    last = store.d_sae - 1
    assert at.session_state[key] == last
    notes = [w.value for w in at.warning]
    assert f"The link asks for feature 99999999, which is not here (features 0–{last}): showing {last}." in notes
    at.run()  # a rerun is no link: the note is gone and the feature stays
    assert at.session_state[key] == last and not any("99999999" in w.value for w in at.warning)


def test_a_linked_position_past_the_text_is_named(env):
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": "Attribution", "text": "The cat sat on the mat",
                            "attr_feature": "1", "position": "500"})
    at.run()
    assert not at.exception, at.exception
    shown = at.session_state["sae-attr-position"]
    assert shown != 500 and any(w.value.startswith("The link asks for position 500, which this text does not have")
                                and f"showing {shown}," in w.value for w in at.warning)


def test_live_view_inputs_live_in_the_url(env):
    """A steering link carries the prompt, the edit and the length; with run=1 it shows that run on open; a value
    the page cannot take is ignored with a note instead of breaking the page."""
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": "Steering", "feature": "3", "text": "The cat sat on the mat",
                            "mode": "ablate", "new": "4", "run": "1", "top": "999"})
    at.run()
    assert not at.exception, at.exception
    assert at.text_area(key="sae-prompt-text").value == "The cat sat on the mat"
    assert at.radio(key="sae-steer-mode").value == "ablate" and at.slider(key="sae-steer-new").value == 4
    assert any("removed" in json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart"))
    assert any("top" in w.value for w in at.warning)  # 999 features is outside the slider's range
    assert at.query_params["run"] == "1" and at.query_params["mode"] == "ablate"
    at.text_area(key="sae-prompt-text").input("A different prompt").run()  # typed, not Run: the link keeps its Run
    assert at.query_params["text"] == "The cat sat on the mat" and at.query_params["new"] == "4"
    at.button(key="sae-steer-run").click().run()
    assert at.query_params["text"] == "A different prompt" and at.query_params["run"] == "1"


def token_pills(at):
    """The prompt view's token pills (keyed by the text, so a new text starts at its own last token)."""
    (key,) = [p.key for p in at.get("button_group") if (p.key or "").startswith("sae-prompt-token-")]
    return at.pills(key=key)


def test_a_new_prompt_starts_at_its_own_last_token(env):
    store, _, _ = env
    at = open_browser(store, "Prompt")
    at.button(key="sae-prompt-run").click().run()
    token_pills(at).set_value(4).run()  # ' truth': a pill's label is its token, and ' a' is there twice
    assert token_pills(at).value == 4
    text = "One two three four five six seven eight nine ten"
    at.text_area(key="sae-prompt-text").input(text).run()
    at.button(key="sae-prompt-run").click().run()
    assert not at.exception
    assert token_pills(at).value == tiny_lm().encode(text).shape[1]  # (after the prepended BOS) not 2 carried over


def test_prompt_view_click_token_then_feature(env):
    store, _, _ = env
    at = open_browser(store, "Prompt")
    at.button(key="sae-prompt-run").click().run()
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["data"][0]["type"] == "heatmap" and spec["layout"]["yaxis"]["type"] == "category"
    from pages._sae_live import DEFAULT_PROMPT

    last = tiny_lm().encode(DEFAULT_PROMPT).shape[1]  # the prepended BOS is position 0
    assert token_pills(at).value == last  # the last token, never the BOS at position 0
    assert at.toggle(key="sae-prompt-bos").value is True  # GPT-2's tokenizer adds no BOS of its own
    captions = " ".join(c.value for c in at.caption)
    assert "0 '<|endoftext|>' (prepended BOS" in captions and "is read like any other" in captions, captions
    assert token_pills(at).options[0] == "It" and "<|endoftext|>" not in token_pills(at).options  # first word in
    assert "prepended BOS" in spec["layout"]["xaxis"]["title"]["text"]
    z = spec["data"][0]["z"]
    column_0 = [row[0] for row in z] if isinstance(z, list) else None
    assert column_0 is None or all(v is None for v in column_0)  # the BOS column is blank, off the colour scale
    token_pills(at).set_value(4).run()
    buttons = [b for b in at.button if b.key and b.key.startswith("sae-active-")]
    assert buttons, "token 4 should have active features"
    assert token_pills(at).value == 4
    feature = int(buttons[0].key.rsplit("-", 1)[1])
    buttons[0].click().run()
    assert not at.exception
    assert at.session_state["sae_view"] == "Feature" and at.session_state["sae_feature"] == feature
    assert at.query_params["feature"] == str(feature)


def test_prepend_bos_is_in_the_url_and_off_reads_the_first_word_at_position_0(env):
    """bos=0 in a link turns the toggle off: nothing is prepended, no sink is measured on the tiny model, so no
    position is excluded (none by rule) and the first word is pill 0; the Attribution view then runs on the same
    positions, and the link keeps bos=0."""
    store, _, _ = env
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    at.query_params.update({"store": store.name, "view": "Prompt", "text": "The cat sat on the mat", "bos": "0",
                            "run": "1"})
    at.run()
    assert not at.exception, at.exception
    n_words = tiny_lm().encode("The cat sat on the mat").shape[1]
    assert at.toggle(key="sae-prompt-bos").value is False
    assert token_pills(at).options[0] == "The" and len(token_pills(at).options) == n_words
    assert token_pills(at).value == n_words - 1
    assert any("No attention sink measured" in c.value for c in at.caption), [c.value for c in at.caption]
    assert at.query_params["bos"] == "0"
    at.toggle(key="sae-prompt-bos").set_value(True).run()
    at.button(key="sae-prompt-run").click().run()  # the view reads the text again on Run
    assert token_pills(at).options[0] == "The" and len(token_pills(at).options) == n_words  # the BOS is no pill
    assert token_pills(at).value == n_words and at.query_params["bos"] == "1"
    at.segmented_control(key="sae_view").set_value("Attribution").run()
    from interpscope.sae import load_sae
    from interpscope.sae.store.prompt import prompt_features

    _, model_dir, sae = env
    view = prompt_features(load_model(str(model_dir), device="cpu"), load_sae(sae), "The cat sat on the mat",
                           prepend_bos=True)
    at.number_input(key="sae-attr-feature").set_value(view.active_at(1)[0]["feature"]).run()  # one that fires there
    at.selectbox(key="sae-attr-position").set_value(1).run()
    at.button(key="sae-attr-run").click().run()
    assert not at.exception, at.exception
    assert any("at token 1 ('The')" in m.value for m in at.markdown), [m.value for m in at.markdown]


@pytest.mark.parametrize("view", ["Prompt", "Attribution", "Steering"])
def test_live_views_reject_empty_and_oversized_text(env, view):
    store, _, _ = env
    at = open_browser(store, view)
    at.text_area(key="sae-prompt-text").input("  \n ").run()
    assert not at.exception and any("empty" in w.value for w in at.warning)
    at.text_area(key="sae-prompt-text").input("word " * 3000).run()
    for key in ("sae-prompt-run", "sae-attr-run", "sae-steer-run"):  # views that wait for Run check it on Run
        if any(b.key == key for b in at.button):
            at.button(key=key).click().run()
    assert not at.exception and any("tokens long" in e.value for e in at.error)


def test_attribution_and_steering_views(env):
    store, _, _ = env
    at = open_browser(store, "Attribution", 2)
    assert not at.exception
    assert any("Press **Run**" in i.value for i in at.info)
    at.button(key="sae-attr-run").click().run()
    assert not at.exception
    labels = " ".join(m.value for m in at.markdown)
    assert "AttnLRP" in labels and "Gradient x Input" in labels
    at.radio(key="sae-attr-method").set_value("cplrp").run()
    at.button(key="sae-attr-run").click().run()
    assert "CP-LRP" in " ".join(m.value for m in at.markdown)
    at.segmented_control(key="sae_view").set_value("Steering").run()
    assert not at.exception and not at.get("plotly_chart")  # nothing runs before Run
    at.button(key="sae-steer-run").click().run()
    kl = float(metrics(at)["KL(clean ‖ edited), next token"])
    assert kl >= 0
    at.radio(key="sae-steer-mode").set_value("ablate").run()
    at.button(key="sae-steer-run").click().run()
    assert not at.exception and len(at.get("plotly_chart")) == 2
    assert any("removed" in json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart"))


def test_no_store_offers_a_build_that_works(env, tmp_path, monkeypatch):
    _, model_dir, sae = env
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path))
    at = run_page()
    assert not at.exception
    assert any("No feature store yet" in i.value for i in at.info)
    at.selectbox(key="sae-build-choice").set_value("Other folder…").run()
    at.text_input(key="sae-build-path").input(str(sae)).run()
    at.number_input(key="sae-build-tokens").set_value(512).run()
    at.button(key="sae-build-go").click().run()
    assert not at.exception
    assert any("Store ready" in s.value for s in at.success)
    assert len(list((tmp_path / "sae_stores").iterdir())) == 1


def steering_title(at) -> str:
    return next(t for t in (json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart"))
                if t.startswith("Next token: clean vs feature"))


def test_a_steering_link_reproduces_its_strength_and_nothing_is_in_the_url_before_run(env):
    store, _, _ = env
    at = open_browser(store, "Steering", 5)
    default = at.number_input(key="sae-steer-strength").value
    from interpscope.sae.store.steering import default_strength

    assert default == pytest.approx(round(default_strength(store.max_activation[5]), 3))
    at.number_input(key="sae-steer-strength").set_value(6.0).run()
    assert "strength" not in at.query_params and "run" not in at.query_params  # an edit waiting for Run
    at.button(key="sae-steer-run").click().run()
    assert not at.exception, at.exception
    link = dict(at.query_params)
    assert link["strength"] == "6.0" and link["run"] == "1" and link["steer_feature"] == "5"
    assert "+ 6 × direction" in steering_title(at)
    fresh = AppTest.from_file(str(ROOT / PAGE), default_timeout=180)
    fresh.session_state["model_name"] = store.spec["model_name"]
    fresh.query_params.update(link)
    fresh.run()
    assert not fresh.exception, fresh.exception
    assert fresh.number_input(key="sae-steer-strength").value == 6.0
    assert "+ 6 × direction" in steering_title(fresh)  # the sender's run, not the default strength
    fresh.number_input(key="sae-steer-feature").set_value(6).run()  # another feature: its own default
    assert fresh.number_input(key="sae-steer-strength").value == pytest.approx(
        round(default_strength(store.max_activation[6]), 3))


def silent_and_firing(store, model_dir, text: str) -> tuple[int, int]:
    """A feature that is 0 at every position of `text` from 1 on, and one that fires there."""
    from interpscope.sae.store.prompt import prompt_features

    lm = load_model(str(model_dir), device="cpu")
    acts = np.asarray(prompt_features(lm, store.load_sae(), text, 5).activations)[1:]
    silent = np.flatnonzero(acts.max(axis=0) <= 0)
    assert silent.size, "every feature fires on the text: pick a shorter one"
    return int(silent[0]), int(acts.max(axis=0).argmax())


def test_ablating_a_feature_that_never_fires_on_the_text_says_why_nothing_changed(env):
    store, model_dir, _ = env
    text = "The cat sat"
    silent, firing = silent_and_firing(store, model_dir, text)
    at = open_browser(store, "Steering", silent, **{"sae-prompt-text": text, "sae-steer-mode": "ablate"})
    at.button(key="sae-steer-run").click().run()
    assert not at.exception, at.exception
    assert metrics(at)["KL(clean ‖ edited), next token"] == "0.0000"
    note = " ".join(i.value for i in at.info)
    assert f"Feature {silent} never fires on this text" in note and "cannot change the next token" in note
    at.number_input(key="sae-steer-feature").set_value(firing).run()
    at.button(key="sae-steer-run").click().run()
    assert not any("never fires" in i.value for i in at.info)


def test_stores_are_those_of_the_sidebar_model_and_none_is_said(env):
    store, _, _ = env
    at = run_page(model_name="gemma3-270m")
    assert not at.exception, at.exception
    note = " ".join(i.value for i in at.info)
    assert "No feature store for **gemma3-270m**" in note and store.spec["model_name"] in note
    assert "interpscope sae train --model gemma3-270m" in note
    assert not any(s.key == "sae_store" for s in at.selectbox)
    at.toggle(key="sae-all-models").set_value(True).run()
    assert at.selectbox(key="sae_store").value == store.name
    mine = open_browser(store)
    assert mine.selectbox(key="sae_store").options == [store.name] and not mine.toggle(key="sae-all-models").value


def test_only_verified_explanations_are_shown_as_explanations(env):
    """Issue 42: an explanation is shown as one only when it beat its control (the store's verification); a
    degenerate, an unverified (not tested) and a not-verified one show "no verified explanation" and the tokens the
    feature fires on, the writer's text only on request and named as unverified text; the counts in the caption
    come from explanation_summary."""
    from interpscope.sae.store.explanation_quality import explanation_summary
    from interpscope.sae.store.explanations import EXPLANATIONS_FILE
    from interpscope.sae.store.verification import VERIFICATION_FILE, explanations_digest

    store, _, _ = env
    entries = [{"feature": 1, "explanation": "The marked words are:", "score": 0.9},
               {"feature": 2, "explanation": "weddings and marriage", "score": 0.95},
               {"feature": 3, "explanation": "weddings and marriage", "score": 0.95},
               {"feature": 4, "explanation": "names of places", "score": None}]
    path = store.folder / EXPLANATIONS_FILE
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    verification = store.folder / VERIFICATION_FILE  # 3 beats its control, 2 does not (its interval reaches 0)
    verification.write_text(json.dumps({
        "scorer": "lexical", "controls": 5, "bootstrap": 1000, "verified": 1, "tested": 2, "written": 4,
        "rows": {"feature": [2, 3], "score": [0.95, 0.9], "control": [0.9, 0.5], "low": [-0.05, 0.2],
                 "high": [0.15, 0.6]},
        "explanations_sha256": explanations_digest(store.folder)}), encoding="utf-8")
    import streamlit as st

    try:
        st.cache_resource.clear()
        st.cache_data.clear()
        at = open_browser(store)
        assert not at.exception, at.exception
        table = at.dataframe[-1].value.set_index("feature")
        assert table.loc[3, "explanation_score"] == 0.9  # the verification's score, verified ones only
        assert all(np.isnan(table.loc[f, "explanation_score"]) for f in (1, 2, 4))
        assert list(table.loc[[1, 2, 3, 4], "explanation"]) == ["degenerate", "not verified", "verified",
                                                               "unverified"]
        caption = " ".join(c.value for c in at.caption)
        summary = explanation_summary(FeatureStore(store.folder))
        assert (summary["written"], summary["verified"], summary["not_verified"], summary["degenerate"],
                summary["unverified"]) == (4, 1, 1, 1, 1)
        assert "**1 of 4 are verified**" in caption
        for feature in (1, 2, 4):
            page = open_browser(store, "Feature", feature)
            text = " ".join(m.value for m in page.markdown) + " ".join(c.value for c in page.caption)
            assert "**No verified explanation**" in text and "**Explanation**" not in text
            assert "weddings" not in text and "names of places" not in text
            page.toggle(key="sae-weak-explanations").set_value(True).run()
            text = " ".join(m.value for m in page.markdown) + " ".join(c.value for c in page.caption)
            assert "**Explanation**" not in text and "Unverified text written by" in text
        page = open_browser(store, "Feature", 3)
        text = " ".join(m.value for m in page.markdown)
        assert "**Explanation**" in text and "weddings and marriage" in text and "AUROC 0.90 vs 0.50" in text
    finally:
        path.unlink()
        verification.unlink()
        st.cache_resource.clear()
        st.cache_data.clear()


def test_attribution_of_an_inactive_feature_says_so_and_names_those_active(env):
    """Run at a token where the feature is 0 draws no all-zero maps: the page says the feature is not active there
    and names the features that are, strongest first (read from the same prompt view the page shows)."""
    from interpscope.sae import load_sae
    from interpscope.sae.store.prompt import prompt_features

    store, model_dir, sae = env
    at = open_browser(store, "Attribution", 2)
    text = at.text_area(key="sae-prompt-text").value
    bos = at.toggle(key="sae-prompt-bos").value
    view = prompt_features(load_model(str(model_dir), device="cpu"), load_sae(sae), text, prepend_bos=bos)
    silent = [(f, p) for f in range(view.activations.shape[1]) for p in range(1, len(view.tokens))
              if view.activations[p, f] <= 0 and view.activations[:, f].max() > 0]
    feature, position = silent[0]
    at.number_input(key="sae-attr-feature").set_value(feature).run()
    at.selectbox(key="sae-attr-position").set_value(position).run()
    at.button(key="sae-attr-run").click().run()
    assert not at.exception, at.exception
    (note,) = [i.value for i in at.info if "is not active" in i.value]
    assert f"Feature {feature} is not active at token {position}" in note
    firing = [row["feature"] for row in view.active_at(position, limit=5)]
    assert all(f"#{f} " in note for f in firing)
    assert not any(f"feature {feature} at token" in m.value for m in at.markdown)  # no maps drawn
    active = int(view.activations[:, feature].argmax())
    at.selectbox(key="sae-attr-position").set_value(active).run()
    at.button(key="sae-attr-run").click().run()
    assert not any("is not active" in i.value for i in at.info)
    assert any(f"feature {feature} at token {active}" in m.value for m in at.markdown)
