"""The SAE overview's released-dictionary picker: the catalogue for the sidebar model, cached ones marked and first;
choosing a cached Gemma Scope 2 SAE reads it (offline) and the page describes it; for a model without releases the
page says which models have them."""
from __future__ import annotations

import pytest

from tests.apptest_util import open_page
from tests.released import gemma_scope_2_tensors, write_gemma_scope_2

NAME = "gemma-scope-2-270m-pt-res/layer_12_width_16k_l0_medium"


@pytest.fixture()
def env(tmp_path, monkeypatch):
    from interpscope.config import data_dir

    models = data_dir() / "models"  # the bundled models' one-time conversions, shared with the other tests
    models.mkdir(parents=True, exist_ok=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def test_a_cached_release_is_listed_first_and_opens(env):
    from pages._sae_releases import RELEASE

    write_gemma_scope_2(env, "resid_post/layer_12_width_16k_l0_medium", gemma_scope_2_tensors(d_in=640, d_sae=32))
    at = open_page("pages/sae_overview.py", model_choice="gemma3-270m")
    assert not at.exception, at.exception
    at.selectbox(key="sae_overview_choice").set_value(RELEASE).run()
    assert not at.exception, at.exception
    picker = at.selectbox(key="sae_overview_release")
    assert picker.options[0].startswith("● cached · " + NAME)
    assert sum(option.startswith("● cached") for option in picker.options) == 1
    assert any("transcoder (affine)" in option and "blocks.3.mlp.hook_in → blocks.3.hook_mlp_out" in option
               for option in picker.options)
    assert picker.value == NAME
    captions = " ".join(c.value for c in at.caption)
    assert "jumprelu SAE · 32 features on blocks.12.hook_resid_post" in captions
    assert "sae=" in str(at.query_params) or at.query_params  # the choice is kept in the link


def test_a_model_without_releases_is_told_which_have_them(env):
    from pages._sae_releases import RELEASE

    at = open_page("pages/sae_overview.py", model_choice="smollm2-135m")
    at.selectbox(key="sae_overview_choice").set_value(RELEASE).run()
    assert not at.exception, at.exception
    assert any("lists no released dictionaries for smollm2-135m" in info.value and "gemma3-270m" in info.value
               for info in at.info)
