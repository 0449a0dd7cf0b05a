"""--sae RELEASE/SAE_ID on the command line: a released dictionary in the Hugging Face cache is read (offline) and
used like any SAE folder; an unknown release, an uncached one and a dictionary of another model exit non-zero with
one clear line."""
from __future__ import annotations

import json

import pytest

from interpscope.cli import main
from tests.released import identity_tensors, write_gemma_scope_2
from tests.sae_store_tiny import save_tiny_lm

NAME = "gemma-scope-2-270m-pt-res/layer_1_width_16k_l0_small"


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_a_release_by_name_evaluates_like_a_folder(env, capsys):
    model = save_tiny_lm(env / "tiny")  # d_model 32: an identity-like SAE of that width, under a Gemma Scope name
    write_gemma_scope_2(env / "hub", "resid_post_all/layer_1_width_16k_l0_small", identity_tensors(32))
    code = main(["sae", "eval", "--sae", "gemma-scope-2-270m-pt-res-all/layer_1_width_16k_l0_small", "--model",
                 str(model), "--tokens", "256", "--context", "32", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "is a released dictionary" in captured.err
    result = json.loads(captured.out)
    assert result["hook_name"] == "blocks.1.hook_resid_post" and result["fvu"] < 1e-8


def test_bad_release_names_and_another_model_exit_with_one_line(env, capsys):
    assert main(["sae", "eval", "--sae", "gemma-scope-2-270m-pt-res-all/layer_1_width_3k"]) != 0
    assert "has no SAE 'layer_1_width_3k'" in capsys.readouterr().err
    assert main(["sae", "eval", "--sae", "gemma-scope-2-270m-pt-res-all/layer_1_width_16k_l0_small"]) != 0
    assert "not in the Hugging Face cache" in capsys.readouterr().err
    write_gemma_scope_2(env / "hub", "resid_post_all/layer_1_width_16k_l0_small", identity_tensors(8))
    assert main(["sae", "eval", "--sae", "gemma-scope-2-270m-pt-res-all/layer_1_width_16k_l0_small", "--model",
                 "smollm2-135m"]) != 0
    err = capsys.readouterr().err
    assert "trained on google/gemma-3-270m (gemma3-270m)" in err and "smollm2-135m" in err
