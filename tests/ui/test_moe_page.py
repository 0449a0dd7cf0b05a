"""The relevance page on a tiny Qwen2-MoE folder (streamlit.testing): the per-expert section under the map, its
export equal to the API's document, its sentences from the numbers beside them; a dense model shows no such section."""
from __future__ import annotations

import json

import pytest
import torch

import interpscope
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.results import without_timings
from tests.apptest_util import open_page
from tests.tiny import FAMILIES

TEXT = "The cat sat on the mat and looked at the"
OTHER = "Other: Hugging Face id or local folder…"


def save(name: str, folder) -> str:
    FAMILIES[name].build(torch.float32, vocab_size=50257).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return str(folder)


def run_page(folder: str):
    at = open_page("pages/relevance.py", model_choice=OTHER, model_custom=folder, device="cpu",
                   **{"relevance-text": TEXT})
    assert not at.exception, at.exception
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    return at


def titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]


@pytest.fixture(scope="module")
def moe_folder(tmp_path_factory) -> str:
    return save("qwen2_moe", tmp_path_factory.mktemp("qwen2_moe"))


def test_the_per_expert_section_is_the_apis_document(moe_folder, exports, capsys):
    at = run_page(moe_folder)
    assert any("Mixture of experts" in h.value for h in at.subheader)
    assert any(t.startswith("Per-expert relevance (attnlrp)") for t in titles(at))
    assert any("beside its share of the router's weight" in t for t in titles(at))  # the control
    lm = interpscope.load(moe_folder, device="cpu")
    api = interpscope.explain_experts(lm, TEXT, "attnlrp").to_dict()
    assert without_timings(exports["experts"]) == without_timings(api)
    from interpscope.cli import main

    capsys.readouterr()
    assert main(["explain", "--model", moe_folder, "--device", "cpu", "--text", TEXT, "--experts", "--json", "-"]) == 0
    assert without_timings(json.loads(capsys.readouterr().out)) == without_timings(api)  # the CLI's --json too
    assert api["closure"] < 1e-5
    shown = " ".join(m.value for m in at.markdown)
    result = interpscope.explain_experts(lm, TEXT, "attnlrp")
    for sentence in result.readings():  # computed from the shares plotted beside them
        assert sentence in shown
    captions = " ".join(c.value for c in at.caption)
    assert "The shared expert carried" in captions and f"{result.closure:.1e} of the logit" in captions


def test_a_dense_model_shows_no_expert_section(tmp_path):
    at = run_page(save("phi3", tmp_path / "phi3"))
    assert not any("Mixture of experts" in h.value for h in at.subheader)
    assert not any(t.startswith("Per-expert relevance") for t in titles(at))
