"""Tuned lens: identity translators are exactly the logit lens; lens files are checked (shape, model, fingerprint)
and refused for another model; the shipped SmolLM2 lens is closer to the final layer than the logit lens at every
middle layer on held-out text; flow --lens tuned is one document on the CLI, the page and the API."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.config import InterpscopeError
from interpscope.flow.tuned import (
    LENS_DIR,
    TunedLens,
    check_lens,
    fingerprint,
    lens_logits,
    load_tuned_lens,
    read_lens,
    save_lens,
)
from tests.tiny import loaded, tiny_llama


class _Tokenizer:
    def __call__(self, text, return_tensors=None):
        return type("Encoded", (), {"input_ids": torch.tensor([[b % 128 for b in text.encode()]])})()

    def decode(self, ids):
        return "".join(chr(int(i)) for i in ids)


def tiny(seed: int = 0, name: str = "tiny"):
    return loaded(tiny_llama(vocab=128, seed=seed), _Tokenizer(), name=name)


def write(folder, lm, rank: int = 4, name: str | None = None, layers: int | None = None):
    n, d = layers or lm.adapter.n_layers, lm.adapter.d_model
    U, V, b = torch.randn(n, d, rank) * 0.1, torch.randn(n, d, rank), torch.randn(n, d) * 0.1
    save_lens(folder, U, V, b, {"model": name or lm.name, "fingerprint": fingerprint(lm.adapter),
                                "heldout_kl": {"tuned": [0.0] * (n + 1), "logit": [0.0] * (n + 1)}})
    return U, V, b


def test_identity_translators_are_the_logit_lens_and_the_last_step_is_the_model():
    lm = tiny()
    n, d = lm.adapter.n_layers, lm.adapter.d_model
    lens = TunedLens(model="tiny", U=torch.zeros(n, d, 3), V=torch.randn(n, d, 3), bias=torch.zeros(n, d),
                     manifest={})
    residual = torch.randn(5, d)
    assert torch.equal(lens.logits(lm.adapter, 1, residual), lens_logits(lm.adapter, residual))
    ids = torch.tensor([[3, 7, 9, 11]])
    from interpscope.capture import capture

    run = capture(lm.adapter, ids, [f"blocks.{n - 1}.hook_resid_post"])
    last = run.activations[f"blocks.{n - 1}.hook_resid_post"]
    assert torch.allclose(lens.logits(lm.adapter, n, last), run.require_logits().float(), atol=1e-4)


def test_lens_files_round_trip_and_are_refused_for_another_model(tmp_path):
    lm = tiny()
    U, V, _ = write(tmp_path / "ok", lm)
    lens = load_tuned_lens(lm, tmp_path / "ok")
    assert torch.allclose(lens.U, U.half().float()) and lens.rank == 4
    write(tmp_path / "name", lm, name="other-model")
    with pytest.raises(InterpscopeError, match="fitted on 'other-model'"):
        load_tuned_lens(lm, tmp_path / "name")
    write(tmp_path / "shape", lm, layers=lm.adapter.n_layers + 1)
    with pytest.raises(InterpscopeError, match="shape"):
        load_tuned_lens(lm, tmp_path / "shape")
    other = tiny(seed=1)  # same name and sizes, other weights: the fingerprint tells
    with pytest.raises(InterpscopeError, match="other unembedding weights"):
        load_tuned_lens(other, tmp_path / "ok")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "translators.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "broken" / "manifest.json").write_text("{}")
    with pytest.raises(InterpscopeError, match="not readable"):
        load_tuned_lens(lm, tmp_path / "broken")
    with pytest.raises(InterpscopeError, match="No tuned lens ships"):
        load_tuned_lens(tiny(name="no-such-model"))


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_shipped_lenses_are_small_and_shaped_as_their_manifest_says(model):
    folder = LENS_DIR / model
    lens = read_lens(folder)
    meta = lens.manifest
    assert meta["model"] == model and lens.U.shape == (meta["n_layers"], meta["d_model"], meta["rank"])
    assert lens.bias.shape == (meta["n_layers"], meta["d_model"])
    assert (folder / "translators.safetensors").stat().st_size < 10 * 2**20
    assert "train_tuned_lens.py" in meta["rebuild"] and len(meta["heldout_kl"]["tuned"]) == meta["n_layers"] + 1


def test_a_shipped_lens_is_refused_for_a_model_it_was_not_fitted_on():
    lens = read_lens(LENS_DIR / "smollm2-135m")
    with pytest.raises(InterpscopeError, match="shape"):
        check_lens(lens, tiny().adapter, "smollm2-135m")


@pytest.mark.bundled
def test_tuned_lens_beats_the_logit_lens_at_every_middle_layer_on_heldout_text(bundled_lm):
    from interpscope.corpus import sample_prompts
    from interpscope.flow.compare import compare_lenses

    tuned, logit = [], []
    for prompt in sample_prompts(4, split="test", min_words=20, max_words=30):
        ids = bundled_lm.encode(prompt)
        result = compare_lenses(bundled_lm, ids, [0])
        tuned.append(result.kl_tuned)
        logit.append(result.kl_logit)
    tuned_mean, logit_mean = np.mean(tuned, 0), np.mean(logit, 0)
    n = bundled_lm.adapter.n_layers
    middle = range(n // 4 + 1, 3 * n // 4 + 2)  # lens steps of blocks n/4 .. 3n/4
    assert all(tuned_mean[i] < logit_mean[i] for i in middle), (tuned_mean, logit_mean)
    assert tuned_mean[-1] == pytest.approx(0.0, abs=1e-4) and logit_mean[-1] == pytest.approx(0.0, abs=1e-4)


@pytest.mark.bundled
def test_flow_with_the_tuned_lens_is_one_document(capsys, exports, bundled_lm):
    import interpscope
    from interpscope.cli import main
    from interpscope.results import without_timings
    from tests.apptest_util import open_page

    text = "The capital of France is"  # short: the document's equality does not depend on the text's length
    capsys.readouterr()
    assert main(["flow", "--text", text, "--lens", "tuned", "--json", "-"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = interpscope.flow(bundled_lm, text, lens="tuned").to_dict()
    at = open_page("pages/flow.py", **{"flow-text": text})
    at.checkbox(key="flow-tuned").check().run()
    at.button(key="flow-run").click().run()
    assert not at.exception, at.exception
    assert without_timings(cli) == without_timings(api) == without_timings(exports["flow-tuned-lens"])
    steps = cli["tuned_lens"]["steps"]
    assert len(steps) == bundled_lm.adapter.n_layers + 1 and {"kl_logit", "kl_tuned"} <= set(steps[0])
    assert "tuned_lens" not in interpscope.flow(bundled_lm, text).to_dict()  # not asked for: absent


@pytest.mark.bundled
def test_the_batched_comparison_is_the_per_step_definition_at_any_chunk_size(bundled_lm, monkeypatch):
    """compare_lenses unembeds every step of both lenses in a few large products; per step and lens it must give
    KL(final || lens) averaged over the kept positions and the last position's top token, whatever the chunking."""
    from interpscope.capture import capture
    from interpscope.flow import compare
    from interpscope.flow.tuned import kl_to_final, lens_logits, load_tuned_lens, step_points

    ids = bundled_lm.encode("The capital of France is Paris, and the capital of Italy is")
    excluded = [0, 3]
    lens, adapter = load_tuned_lens(bundled_lm), bundled_lm.adapter
    points = step_points(adapter)
    acts = capture(adapter, ids, points).activations
    keep = [p for p in range(ids.shape[1]) if p not in excluded]
    final = lens_logits(adapter, acts[points[-1]].reshape(ids.shape[1], -1)[keep])
    expected = {"kl_logit": [], "kl_tuned": [], "top_logit": [], "top_tuned": []}
    for step, point in enumerate(points):
        residual = acts[point].reshape(ids.shape[1], -1)[keep]
        shown = {"logit": lens_logits(adapter, residual), "tuned": lens.logits(adapter, step, residual)}
        for name, logits in shown.items():
            expected[f"kl_{name}"].append(float(kl_to_final(final, logits).mean()))
            expected[f"top_{name}"].append(bundled_lm.token_strings([int(logits[-1].argmax())])[0])
    for rows in (1, len(keep) * 5 + 1, 10_000):  # one step a product, steps split across products, all at once
        monkeypatch.setattr(compare, "ROWS_PER_PRODUCT", rows)
        result = compare.compare_lenses(bundled_lm, ids, excluded)
        assert result.positions == keep
        for key in ("kl_logit", "kl_tuned"):
            np.testing.assert_allclose(getattr(result, key), expected[key], rtol=1e-4, atol=1e-5)
        assert result.top_logit == expected["top_logit"] and result.top_tuned == expected["top_tuned"]
