"""The shipped Mamba LM (assets/models/mamba-tiny): loads offline, is a real language model, and is explained by
MambaLRP through the library and the command line with the same JSON as the transformer methods."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from interpscope.cli import main
from interpscope.corpus import paragraphs, token_stream
from interpscope.models import load_model
from interpscope.models.registry import BUNDLED

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be"


@pytest.fixture(scope="module")
def mamba_lm():
    return load_model("mamba-tiny", device="cpu")


def test_registered_and_loads_offline(mamba_lm):
    assert BUNDLED["mamba-tiny"].family == "mamba"
    assert mamba_lm.family == "mamba" and mamba_lm.adapter.family == "mamba"
    ids = mamba_lm.encode(TEXT)
    assert mamba_lm.tokenizer.decode(ids[0]) == TEXT
    meta = json.loads((BUNDLED["mamba-tiny"].folder() / "interpscope.json").read_text())
    assert "train_mamba.py" in meta["rebuild"]
    weights = BUNDLED["mamba-tiny"].folder() / "model.safetensors"
    assert weights.stat().st_size < 25 * 2**20


def test_beats_the_unigram_baseline_on_held_out_text(mamba_lm):
    tokenizer = mamba_lm.tokenizer
    held_out = token_stream(tokenizer, paragraphs(split="test"), max_tokens=8 * 128).view(8, 128)
    with torch.no_grad():
        logits = mamba_lm.model(input_ids=held_out, use_cache=False).logits[:, :-1]
    model_nll = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), held_out[:, 1:].reshape(-1)))
    train = token_stream(tokenizer, paragraphs(split="train"))
    counts = torch.bincount(train, minlength=len(tokenizer)).double() + 1.0
    unigram_nll = float(-torch.log(counts / counts.sum())[held_out[:, 1:].reshape(-1)].mean())
    assert math.exp(model_nll) < 0.7 * math.exp(unigram_nll), (math.exp(model_nll), math.exp(unigram_nll))


def test_mambalrp_conserves_on_the_shipped_model_in_float64():
    lm = load_model("mamba-tiny", device="cpu", dtype="float64")
    from interpscope.relevance.api import explain

    result = explain(lm, TEXT, "mambalrp")
    c = result.conservation
    assert result.method == "mambalrp" and len(result.relevance) == len(result.tokens)
    assert c.relative_error < 1e-6
    assert abs(c.input_sum + c.bias_sum - result.logit) < 1e-6 * abs(result.logit)


@pytest.mark.parametrize("method", [None, "mambalrp", "gradxinput", "ig"])
def test_cli_explain_on_mamba_same_json(capsys, tmp_path, mamba_lm, method):
    out = tmp_path / "result.json"
    argv = ["explain", "--model", "mamba-tiny", "--text", TEXT, "--json", str(out)]
    code = main(argv + (["--method", method] if method else []))
    capsys.readouterr()
    assert code == 0
    data = json.loads(out.read_text())
    assert data["model"] == "mamba-tiny" and data["method"] == (method or "mambalrp")
    assert data["tokens"] == mamba_lm.token_strings(mamba_lm.encode(TEXT)[0])
    assert len(data["relevance"]) == len(data["tokens"])
    if (method or "mambalrp") == "mambalrp":
        assert {"input_sum", "bias_sum", "relative_error"} <= set(data["conservation"])
        assert data["conservation"]["relative_error"] < 1e-3
        assert "softmax_sum" not in data["conservation"]  # no attention, no softmax share: absent, not 0
    else:
        assert "conservation" not in data


def test_cli_refuses_attnlrp_on_mamba(capsys):
    code = main(["explain", "--model", "mamba-tiny", "--text", TEXT, "--method", "attnlrp"])
    err = capsys.readouterr().err
    assert code == 2 and ("mambalrp" in err or "MambaLRP" in err)


def test_a_local_hf_mamba_checkpoint_is_explained_through_the_adapter(tmp_path, mamba_lm):
    """A user's own MambaForCausalLM folder (here a tiny random one with the shipped tokenizer) works too."""
    from interpscope.relevance.api import explain
    from tests.tiny import tiny_mamba

    tiny_mamba(vocab=len(mamba_lm.tokenizer), seed=2).save_pretrained(tmp_path)
    mamba_lm.tokenizer.save_pretrained(tmp_path)
    local = load_model(str(tmp_path), device="cpu", dtype="float64")
    assert local.family == "mamba"
    result = explain(local, TEXT, "mambalrp")
    assert result.conservation.relative_error < 1e-6
    assert len(result.relevance) == len(local.encode(TEXT)[0])
