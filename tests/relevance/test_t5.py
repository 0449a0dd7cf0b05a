"""T5 / Flan-T5 encoder-decoders (issue 24.2): tiny random folders (relative position bias; ReLU and gated-GELU MLPs)
explained from the CLI, the API and the relevance page, with conservation over the source AND the decoder input."""
from __future__ import annotations

import json

import pytest
import torch

import interpscope
from interpscope.adapters import family_of, get_adapter
from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.relevance.rules import attnlrp_rules, cplrp_rules
from interpscope.relevance.seq2seq_engine import attribute_seq2seq
from interpscope.relevance.targets import Target
from interpscope.results import without_timings
from tests.tiny import ENCODER_DECODERS, save_tiny_t5, tiny_t5

SOURCE = "translate English to German: the cat sat on the mat."


@pytest.fixture(scope="module", params=[False, True], ids=["relu", "gated-gelu"])
def t5_folder(request, tmp_path_factory):
    return save_tiny_t5(tmp_path_factory.mktemp("t5"), gated=request.param)


@pytest.fixture(scope="module")
def flan_folder(tmp_path_factory):
    """The gated-GELU (Flan-T5) variant alone, for the checks that need not run on both."""
    return save_tiny_t5(tmp_path_factory.mktemp("flan"), gated=True, seed=1)


def _unpatched_logit(folder, source: str, decoder_ids: list[int], token_id: int) -> float:
    lm = interpscope.load(str(folder), device="cpu")
    with torch.no_grad():
        logits = lm.model(input_ids=lm.encode(source), decoder_input_ids=torch.tensor([decoder_ids])).logits
    return float(logits[0, -1, token_id])


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("method", ["cplrp", "attnlrp"])
def test_cli_explains_a_t5_folder_with_the_unpatched_logit(t5_folder, tmp_path, capsys, method):
    out = tmp_path / "map.json"
    code, _, err = _cli(capsys, "explain", "--model", str(t5_folder), "--device", "cpu", "--text", SOURCE,
                        "--decoder-text", "the", "--method", method, "--json", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == "interpscope.relevance_seq2seq" and doc["method"] == method
    assert doc["decoder_tokens"][0] == "<pad>" and doc["decoder_tokens"][1:] == ["the"]
    assert doc["source_tokens"][-1] == "</s>" and len(doc["source_relevance"]) == len(doc["source_tokens"])
    assert doc["target"]["position"] == 1
    c = doc["conservation"]
    assert abs(c["source_sum"] - sum(doc["source_relevance"])) < 1e-9
    assert abs(c["decoder_sum"] - sum(doc["decoder_relevance"])) < 1e-9
    assert c["relative_error"] <= 1e-3
    unpatched = _unpatched_logit(t5_folder, SOURCE, doc["decoder_ids"], doc["target"]["token_id"])
    assert abs(doc["logit"] - unpatched) <= 1e-6 * max(1.0, abs(unpatched))
    if method == "cplrp":  # conserves on its own: no softmax share, no position-bias share
        assert "softmax_sum" not in c and "position_bias_sum" not in c
        assert abs(c["source_sum"] + c["decoder_sum"] - doc["logit"]) <= 1e-3 * abs(doc["logit"])
    else:  # AttnLRP books what its softmaxes drop and what the position bias takes; without them it misses
        assert abs(c["softmax_sum"]) > 1e-3 * abs(doc["logit"]) and c["position_bias_sum"] != 0
        assert abs(c["gap_without_softmax"]) > 10 * c["relative_error"]
        assert set(c["scores_by_attention"]) == {"encoder.0.self", "encoder.1.self", "decoder.0.self",
                                                 "decoder.1.self", "decoder.0.cross", "decoder.1.cross"}
    # the decoder start token is excluded from the colour scale and named; no source token is
    assert doc["decoder_sinks"][0]["reason"] == "decoder start token"


@pytest.mark.parametrize("gated", [False, True], ids=["relu", "gated-gelu"])
def test_cplrp_conserves_in_float64_and_attnlrp_books_balance(gated):
    model = tiny_t5(gated=gated, seed=3)
    adapter = get_adapter(model)
    source = torch.randint(3, 100, (1, 9), generator=torch.Generator().manual_seed(0))
    decoder = torch.tensor([[0, 7, 12, 30]])
    with torch.no_grad():
        reference = model(input_ids=source, decoder_input_ids=decoder).logits[0, -1]
    target = Target(3, int(reference.argmax()))
    y = float(reference[target.token_id])
    exact = attribute_seq2seq(adapter, source, decoder, target, cplrp_rules(adapter), through_softmax=False)
    assert exact.logit == pytest.approx(y, rel=1e-12)
    total = exact.source_relevance.sum() + exact.decoder_relevance.sum()
    assert abs(total - y) <= 1e-5 * abs(y)
    assert exact.conservation is not None and exact.conservation.relative_error <= 1e-5
    booked = attribute_seq2seq(adapter, source, decoder, target, attnlrp_rules(adapter), through_softmax=True)
    c = booked.conservation
    assert c is not None and c.softmax_sum is not None and c.position_bias_sum is not None
    assert c.relative_error <= 1e-5  # inputs + softmax + position bias == y
    assert abs(total - (booked.source_relevance.sum() + booked.decoder_relevance.sum())) > 1e-3 * abs(y)
    plain = attribute_seq2seq(adapter, source, decoder, target, [], through_softmax=False, conservation=False)
    gap = abs(plain.source_relevance.sum() + plain.decoder_relevance.sum() - y) / abs(y)
    assert gap > 1e-2  # Gradient x Input breaks conservation: the rules are what make it hold
    # the rules are undone: the same model computes the same logits afterwards
    with torch.no_grad():
        assert torch.equal(model(input_ids=source, decoder_input_ids=decoder).logits[0, -1], reference)


@pytest.mark.parametrize("name", list(ENCODER_DECODERS))
def test_registry_encoder_decoders_claim_their_family_and_conserve(name):
    family = ENCODER_DECODERS[name]
    model = family.build()
    adapter = get_adapter(model)
    assert adapter.family == family.adapter_family == family_of(model.config.model_type)
    assert adapter.capabilities() == family.capabilities
    source, decoder = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(2)), torch.tensor([[0, 5]])
    with torch.no_grad():
        reference = model(input_ids=source, decoder_input_ids=decoder).logits[0, -1]
    target = Target(1, int(reference.argmin()))  # a negative logit: the sign is conserved too
    result = attribute_seq2seq(adapter, source, decoder, target, cplrp_rules(adapter), through_softmax=False)
    assert result.logit == pytest.approx(float(reference[target.token_id]), rel=1e-12)
    assert result.conservation is not None and result.conservation.relative_error <= 1e-5


def test_a_decoder_prefix_moves_the_target_position(flan_folder):
    lm = interpscope.load(str(flan_folder), device="cpu")
    first = interpscope.explain_seq2seq(lm, SOURCE, None, "cplrp")
    later = interpscope.explain_seq2seq(lm, SOURCE, "the big house", "cplrp")
    assert first.target.position == 0 and first.decoder_tokens == ["<pad>"]
    assert interpscope.predict(lm, SOURCE).predictions[0].id == first.target.token_id  # Home: first decoder token
    assert later.decoder_tokens == ["<pad>", "the", "big", "house"] and later.target.position == 3
    assert later.decoder_relevance.shape == (4,) and first.source_relevance.shape == later.source_relevance.shape
    assert later.logit == pytest.approx(_unpatched_logit(flan_folder, SOURCE, later.decoder_ids,
                                                         later.target.token_id), rel=1e-5)
    picked = interpscope.explain_seq2seq(lm, SOURCE, "the", "attnlrp", target="cat")
    assert picked.target.token == "cat" and picked.target.position == 1
    contrast = interpscope.explain_seq2seq(lm, SOURCE, "the", "cplrp", contrast=("cat", "dog"))
    dog = interpscope.explain_seq2seq(lm, SOURCE, "the", "cplrp", target="dog")
    cat = interpscope.explain_seq2seq(lm, SOURCE, "the", "cplrp", target="cat")
    assert contrast.logit == pytest.approx(cat.logit - dog.logit, rel=1e-5)  # linear in the target under CP-LRP
    assert contrast.source_relevance == pytest.approx(cat.source_relevance - dog.source_relevance, abs=1e-4)


def test_baselines_run_on_both_inputs(flan_folder):
    lm = interpscope.load(str(flan_folder), device="cpu")
    ig = interpscope.explain_seq2seq(lm, SOURCE, "the", "ig", ig_steps=16)
    k = ig.completeness
    assert k is not None and k.steps == 16
    assert k.relevance_sum == pytest.approx(ig.source_relevance.sum() + ig.decoder_relevance.sum())
    gxi = interpscope.explain_seq2seq(lm, SOURCE, "the", "gradxinput")
    assert gxi.conservation is None and gxi.target == ig.target


def test_bad_input_is_refused_with_exit_2(flan_folder, capsys):
    code, _, err = _cli(capsys, "explain", "--model", "smollm2-135m", "--text", "Hello there", "--decoder-text",
                        "General")
    assert code == 2 and "--decoder-text is for encoder-decoder models" in err and "llama" in err
    code, _, err = _cli(capsys, "explain", "--model", str(flan_folder), "--device", "cpu", "--text", SOURCE,
                        "--method", "occlusion")
    assert code == 2 and "does not run on encoder-decoders" in err
    code, _, err = _cli(capsys, "explain", "--model", str(flan_folder), "--device", "cpu", "--text", "")
    assert code == 2 and err.strip()
    lm = interpscope.load(str(flan_folder), device="cpu")
    with pytest.raises(InterpscopeError, match="explain_seq2seq"):  # the decoder-only API says where to go
        interpscope.explain(lm, SOURCE)


def test_one_document_cli_page_api(t5_folder, capsys, exports):
    from tests.apptest_util import open_page

    code, out, err = _cli(capsys, "explain", "--model", str(t5_folder), "--device", "cpu", "--text", SOURCE,
                          "--decoder-text", "the", "--method", "attnlrp", "--json", "-")
    assert code == 0, err
    cli = json.loads(out)
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(t5_folder), device="cpu",
                   **{"relevance-text": SOURCE, "relevance-decoder": "the"})
    assert not at.exception, at.exception
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    lm = interpscope.load(str(t5_folder), device="cpu")
    api = interpscope.explain_seq2seq(lm, SOURCE, "the", "attnlrp").to_dict()
    assert without_timings(cli) == without_timings(exports["map-seq2seq"]) == without_timings(api)
    shown = [m.value for m in at.markdown if 'class="relevance-heatmap"' in m.value]
    assert len(shown) == 1 and shown[0].count('class="relevance-heatmap"') == 2  # source, decoder input
    assert "decoder start token" in shown[0]
    sentence = " ".join(c.value for c in at.caption)
    assert f"relative error {cli['conservation']['relative_error']:.1e}" in sentence
    assert "a uniform spread over these tokens would give the source" in sentence  # the split's control
    result = interpscope.explain_seq2seq(lm, SOURCE, "the", "attnlrp")
    held = sum(abs(result.source_relevance[i]) for i in result.source_excluded) + \
        sum(abs(result.decoder_relevance[i]) for i in result.decoder_excluded)
    assert result.decoder_excluded  # the decoder start token
    if held:  # 45.9: the split over kept tokens names what the excluded positions hold, beside the signed readout
        assert "excluded positions (named on the maps) hold" in sentence and "Of the rest" in sentence
