"""The attention-heads page (streamlit.testing, a tiny Llama folder): the text source's radio and the head finder's
ablation are two inputs with two keys, so a Patterns link carries no ablation, an upload stays chosen, and a
finder link's ablation comes back from its URL."""
from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from interpscope.models.tokenizers import gpt2_tokenizer
from tests.apptest_util import APP, ROOT

TEXT = "one two three four one two three four"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    folder = tmp_path_factory.mktemp("heads-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return str(folder)


def open_link(params: dict) -> AppTest:
    """The heads page opened from a link carrying `params` (as a reload or a shared URL opens it)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(params)
    at.run()  # the sidebar takes the link's model (a page is switched to only after a first run)
    at.query_params.clear()
    at.query_params.update(params)
    at.switch_page(str(ROOT / "pages/heads.py"))
    return at.run()


def url(at: AppTest) -> dict[str, str]:
    return {k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()}


def ignored(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "Ignored link parameter" in w.value]


def test_a_patterns_link_carries_no_ablation_and_comes_back_clean(llama_folder):
    """Before: the text source's radio and the finder's ablation shared the key heads-mode, so every Patterns URL
    held ablation=Paste+text, and a reload said "Ignored link parameter(s) ... ablation"."""
    at = open_link({"model": llama_folder, "device": "cpu", "text": TEXT})
    at.button(key="heads-run").click().run()
    assert not at.exception, at.exception
    link = url(at)
    assert link.get("run") == "1" and link.get("text") == TEXT and "ablation" not in link, link
    again = open_link(link)
    assert not again.exception, again.exception
    assert ignored(again) == [] and url(again) == link
    # choosing an upload is the text source's own choice: it stays on the next runs and touches no finder input
    again.radio(key="heads-mode").set_value("Upload a file").run()
    again.run()
    assert again.radio(key="heads-mode").value == "Upload a file"
    assert "ablation" not in url(again)


def test_a_finder_links_ablation_round_trips(llama_folder):
    at = open_link({"model": llama_folder, "device": "cpu", "view": "Head finder", "ablation": "mean",
                    "sequences": "2", "half": "6", "ablate": "1"})
    assert not at.exception, at.exception
    assert ignored(at) == []
    assert at.selectbox(key="heads-ablation").value == "mean"
    at.button(key="heads-find-run").click().run()
    assert not at.exception, at.exception
    link = url(at)
    assert link.get("ablation") == "mean" and link.get("run") == "1", link
    again = open_link(link)
    assert not again.exception, again.exception
    assert ignored(again) == [] and again.selectbox(key="heads-ablation").value == "mean"
    assert any("mean-ablated" in c.value for c in again.caption)  # the linked Run ran with mean ablation
