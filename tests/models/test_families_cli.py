"""Tiny random Mixtral, Qwen2-MoE and Phi-3 folders (save_pretrained, with the real GPT-2 tokenizer) explain from the
command line: CP-LRP conserves to 1e-3 relative and the explained logit is the unpatched model's. A model type no
adapter claims is still refused with the one-line message and exit status 2."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, BloomConfig, BloomForCausalLM

from interpscope.cli import main
from interpscope.models.tokenizers import gpt2_tokenizer
from tests.tiny import FAMILIES

TEXT = "The cat sat on the mat and looked at the"
GPT2_VOCAB = 50257


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer()


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe", "phi3"])
def test_a_saved_folder_explains_from_the_cli(name, tmp_path, tokenizer, capsys):
    folder = tmp_path / name
    FAMILIES[name].build(torch.float32, vocab_size=GPT2_VOCAB).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "result.json"
    code = main(["explain", "--model", str(folder), "--text", TEXT, "--method", "cplrp", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["method"] == "cplrp" and data["conservation"]["relative_error"] <= 1e-3
    unpatched = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    unpatched.set_attn_implementation("eager")  # as the loader runs it
    with torch.no_grad():
        logits = unpatched(input_ids=torch.tensor([data["token_ids"]])).logits[0, data["target"]["position"]]
    expected = float(logits[data["target"]["token_id"]])
    assert abs(data["logit"] - expected) <= 1e-5 * max(1.0, abs(expected))
    assert data["target"]["token_id"] == int(logits.argmax())  # the predicted token, by default


def test_an_unclaimed_model_type_is_still_refused(tmp_path, tokenizer, capsys):
    folder = tmp_path / "bloom"
    BloomForCausalLM(BloomConfig(vocab_size=GPT2_VOCAB, hidden_size=16, n_layer=1, n_head=2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code = main(["explain", "--model", str(folder), "--text", TEXT, "--method", "cplrp", "--json", "-"])
    err = capsys.readouterr().err
    assert code == 2 and "Unsupported model type 'bloom'" in err and "mixtral" in err and "phi3" in err
    assert len(err.strip().splitlines()) == 1
