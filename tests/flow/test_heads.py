"""Attention heads: a hand-built induction circuit in a tiny GPT-2 is what the head finder ranks first; chance levels
are what a uniform causal pattern scores; head ablation acts on its own run only; the heads command refuses bad
input with exit 2; CLI, page export and to_dict() give one document (bundled model)."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from interpscope.capture import editing, foreign_hooks
from interpscope.cli import build_parser, main
from interpscope.entropy_neurons.induction import repeated_sequences
from interpscope.heads.ablation import ablated, repetition
from interpscope.heads.finder import KINDS, chance_levels, find_heads, score_heads
from interpscope.heads.patterns import causal_chance, head_patterns
from interpscope.results import without_timings
from tests.tiny import loaded

D, N_HEADS, D_HEAD, TOK, POS = 256, 4, 64, slice(0, 32), 32  # token block 0..31, positions 32..95, previous 96..127
PREV = 96
PREV_HEAD, INDUCTION_HEAD = 1, 2  # layer 0 head 1 copies the previous token; layer 1 head 2 does induction


class ByteTokenizer:
    """A 128-token stand-in tokenizer: id 0 is BOS (special), text bytes mod 128 otherwise."""

    bos_token_id = eos_token_id = 0
    all_special_ids = [0]

    def __len__(self) -> int:
        return 128

    def __call__(self, text, return_tensors=None, **kwargs):
        ids = [max(1, b % 128) for b in str(text).encode()]
        return type("Encoded", (), {"input_ids": torch.tensor([ids]) if return_tensors else ids})()

    def decode(self, ids, **kwargs):
        return "".join(chr(65 + int(i) % 26) for i in ids)


def planted_model() -> GPT2LMHeadModel:
    """A 2-layer attention-only GPT-2 whose weights are set by hand: token t embeds as a random unit vector in dims
    0..31, position p as one-hot dim 32 + p; layer 0 head 1 attends from p to p - 1 and writes the token it reads
    into dims 96..127; layer 1 head 2 matches the current token against that 'previous token' of every key, so it
    attends to the token after the earlier occurrence: induction. Every other head and every MLP is zero."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_embd=D, n_layer=2, n_head=N_HEADS, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        for block in model.transformer.h:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        model.transformer.ln_f.weight.fill_(1.0)
        tokens = torch.randn(128, 32)
        model.transformer.wte.weight[:, TOK] = tokens / tokens.norm(dim=1, keepdim=True)
        model.transformer.wpe.weight[:, POS:POS + 64] = torch.eye(64)
        w0, o0 = model.transformer.h[0].attn.c_attn.weight, model.transformer.h[0].attn.c_proj.weight
        q, k, v = 0, D, 2 * D
        head = PREV_HEAD * D_HEAD
        for j in range(63):  # query at p reads one-hot p and looks for key position p - 1
            w0[POS + j + 1, q + head + j] = 1.0
        for j in range(64):
            w0[POS + j, k + head + j] = 1.0
        for j in range(32):  # value: the key's token, written to the 'previous token' block
            w0[j, v + head + j] = 1.0
            o0[head + j, PREV + j] = 0.09
        w1, o1 = model.transformer.h[1].attn.c_attn.weight, model.transformer.h[1].attn.c_proj.weight
        head = INDUCTION_HEAD * D_HEAD
        for j in range(32):
            w1[j, q + head + j] = 3.0  # the current token ...
            w1[PREV + j, k + head + j] = 1.0  # ... against each key's previous token
            w1[j, v + head + j] = 1.0
            o1[head + j, j] = 0.5  # the copied token outweighs the current one in the unembedding
    model.set_attn_implementation("eager")
    return model


@pytest.fixture(scope="module")
def tiny():
    return loaded(planted_model(), ByteTokenizer(), name="planted-induction")


def test_the_planted_induction_head_is_the_finders_first(tiny):
    scores = find_heads(tiny, n_sequences=6, half_len=20, seed=3)
    assert scores.ranked("induction")[0][:2] == (1, INDUCTION_HEAD)
    assert scores.ranked("previous_token")[0][:2] == (0, PREV_HEAD)
    top = scores.top("induction", 1)[0]
    assert top["score"] > 0.5 and top["over_chance"] > 5
    others = [s for layer, head, s in scores.ranked("induction")[1:]]
    assert max(others) < 0.5 * top["score"]
    document = scores.to_dict()
    assert document["schema"] == "interpscope.head_scores" and set(document["scores"]) == set(KINDS)
    assert "ablation" not in document  # not asked for: absent, not null


def test_chance_is_what_a_uniform_causal_pattern_scores():
    half = 7
    S = 1 + 2 * half
    uniform = torch.tril(torch.ones(S, S)) / torch.arange(1, S + 1)[:, None]
    attention = uniform.expand(1, 2, 3, S, S)  # [L, B, H, S, S]
    scores = score_heads(attention, half)
    for kind, level in chance_levels(half).items():
        assert np.allclose(scores[kind], level)
    pattern = uniform.numpy()[None, None]
    from interpscope.heads.patterns import summaries

    stats = summaries(pattern, [])
    for name, level in causal_chance(S).items():
        assert stats[name][0, 0] == pytest.approx(level)


def test_ablation_edits_its_own_run_only_and_hurts_repetition(tiny):
    tokens = repeated_sequences(tiny.tokenizer, 128, 4, 20, seed=1)
    with torch.no_grad():
        before = tiny.model(input_ids=tokens).logits
    clean, _ = repetition(tiny, tokens)
    with ablated(tiny, [(1, INDUCTION_HEAD)]):
        cut, _ = repetition(tiny, tokens)
    with ablated(tiny, [(1, 0)]):
        other, _ = repetition(tiny, tokens)
    with torch.no_grad():
        after = tiny.model(input_ids=tokens).logits
    assert torch.equal(before, after) and foreign_hooks(tiny.model) == [] and not editing(tiny.model)
    assert cut < clean and other == clean  # head 1.0 writes nothing: ablating it changes nothing


def test_patterns_name_the_prepended_bos_and_carry_only_the_heads_asked_for(tiny):
    result = head_patterns(tiny, "abcabc", heads=["1.2"], prepend_bos=True)
    assert result.bos_prepended and result.sinks[0]["position"] == 0 and result.sinks[0]["prepended"]
    assert np.allclose(result.patterns.astype(np.float32).sum(-1), 1.0, atol=2e-3)
    document = result.to_dict()
    assert document["schema"] == "interpscope.heads" and list(document["patterns"]) == ["1.2"]
    assert len(document["summaries"]) == 2 * N_HEADS
    assert np.allclose(document["patterns"]["1.2"], result.pattern(1, 2), atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["heads"], "one of the arguments --text --find is required"),
    (["heads", "--text", ""], "empty"),
    (["heads", "--text", "hi", "--find"], "not allowed with"),
    (["heads", "--find", "--head", "1.1"], "belong to --text"),
    (["heads", "--text", "hi", "--ablate", "3"], "belong(s) to --find"),
    (["heads", "--find", "--half-len", "1"], "--half-len"),
    (["heads", "--text", "hi", "--head", "x"], "LAYER.HEAD"),
    (["heads", "--find", "--ablate", "270"], "Can ablate"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.lower() in err.lower() and err.count("\n") == 1


@pytest.mark.bundled
def test_one_document_cli_page_api(capsys, exports, bundled_lm):
    from tests.apptest_util import open_page

    text = "The cat sat on the mat. The cat sat on the mat."
    capsys.readouterr()
    assert main(["heads", "--text", text, "--head", "3.1", "--json", "-"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = head_patterns(bundled_lm, text, heads=["3.1"]).to_dict()
    at = open_page("pages/heads.py", **{"heads-text": text, "heads-head": "3.1"})
    at.button(key="heads-run").click().run()
    assert not at.exception, at.exception
    assert without_timings(cli) == without_timings(api) == without_timings(exports["heads-pattern"])
    assert cli["sinks"] and list(cli["patterns"]) == ["3.1"]
    # The finder on 2 x (2 x 10) tokens: the document's equality does not depend on the size; the defaults the page
    # shows are the CLI's and the API's, and what the user types is what all three run.
    defaults = build_parser().parse_args(["heads", "--find"])
    signature = inspect.signature(find_heads).parameters
    assert main(["heads", "--find", "--ablate", "5", "--sequences", "2", "--half-len", "10", "--json", "-"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = find_heads(bundled_lm, ablate=5, n_sequences=2, half_len=10).to_dict()
    at = open_page("pages/heads.py", **{"heads-view": "Head finder"})
    for key, cli_default, api_default in (("heads-seqs", defaults.sequences, signature["n_sequences"].default),
                                          ("heads-half", defaults.half_len, signature["half_len"].default)):
        assert at.number_input(key=key).value == cli_default == api_default
    at.number_input(key="heads-seqs").set_value(2)
    at.number_input(key="heads-half").set_value(10)
    at.button(key="heads-find-run").click().run()
    assert not at.exception, at.exception
    assert without_timings(cli) == without_timings(api) == without_timings(exports["heads-finder"])
    assert cli["ablation"]["k"] == 5 and len(cli["ablation"]["random"]) == 5
    assert (cli["sequences"]["n"], cli["sequences"]["half_len"]) == (2, 10)
    assert main(["heads", "--text", "hi", "--head", "99.0"]) == 2  # the model's size is known once it is loaded
    assert "No head 99.0" in capsys.readouterr().err


def test_summaries_are_the_float64_definitions_on_causal_patterns():
    from interpscope.heads.patterns import summaries

    generator = torch.Generator().manual_seed(0)
    T = 9
    scores = torch.randn(2, 3, T, T, generator=generator).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    pattern = torch.softmax(scores, -1).numpy()
    p = pattern.astype(np.float64)
    stats = summaries(pattern, [0, 2])
    np.testing.assert_allclose(stats["previous_token"], p[..., np.arange(1, T), np.arange(T - 1)].mean(-1), atol=1e-15)
    np.testing.assert_allclose(stats["self"], p[..., np.arange(T), np.arange(T)].mean(-1), atol=1e-15)
    np.testing.assert_allclose(stats["sinks"], p[..., [0, 2]].sum(-1).mean(-1), atol=1e-15)
    logs = np.log(np.where(p > 0, p, 1.0))
    np.testing.assert_allclose(stats["entropy"], -(p * logs).sum(-1).mean(-1), atol=1e-14)
    assert stats["entropy"].min() > 0 and np.all(summaries(pattern, [])["sinks"] == 0)


def test_patterns_from_one_pass_stopped_after_the_last_attention_equal_a_full_pass():
    """head_patterns reads the sinks' middle residual off the same pass and stops it after the last attention: the
    patterns and the sinks are those of a full pass and of interpscope.relevance.sinks.sink_report."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interpscope.heads.patterns import attention_probabilities
    from interpscope.relevance.api import input_ids_for, model_kind
    from interpscope.relevance.sinks import sink_report
    from interpscope.sinks import words

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    lm = loaded(LlamaForCausalLM(config).eval(), ByteTokenizer(), name="tiny-4-layers")
    lm.model.set_attn_implementation("eager")
    text = "the cat sat on the mat and the cat sat"
    result = head_patterns(lm, text, prepend_bos=True)
    ids, prepended = input_ids_for(lm, text, True)
    assert prepended and result.sinks  # the prepended BOS at least is named
    full = attention_probabilities(lm, ids, stop=False)[:, 0].numpy()
    np.testing.assert_allclose(result.patterns.astype(np.float32), full, atol=1e-3)  # stored as float16
    np.testing.assert_array_equal(attention_probabilities(lm, ids)[:, 0].numpy(), full)
    report = sink_report(lm.adapter, ids, 0 if prepended else None)
    assert result.sinks == report.rows(result.tokens, words(model_kind(lm.adapter))["sink"])
    assert foreign_hooks(lm.model) == [] and not editing(lm.model)


@pytest.mark.bundled
def test_a_linked_head_the_model_lacks_is_named(bundled_lm):
    """head=99.0 in a link opened the strongest previous-token head instead, without a word."""
    from tests.apptest_util import open_page

    at = open_page("pages/heads.py", **{"heads-text": "The cat sat on the mat.", "heads-head": "99.0"})
    at.button(key="heads-run").click().run()
    assert not at.exception, at.exception
    shown = at.selectbox(key="heads-head").value
    layers, heads = bundled_lm.adapter.n_layers, bundled_lm.adapter.n_heads
    assert shown != "99.0" and (f"There is no head '99.0' here (heads are layer.head, layers 0–{layers - 1}, heads "
                                f"0–{heads - 1}): showing {shown}, the strongest previous-token head.") in [
        w.value for w in at.warning]
    at.run()  # said once: the head shown is now the page's own
    assert not [w.value for w in at.warning if "99.0" in w.value]
