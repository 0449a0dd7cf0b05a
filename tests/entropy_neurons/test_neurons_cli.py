"""The planted entropy neuron through the command line, on a model saved to a local folder (GPT-2 config with
the real 50257-token vocabulary, tiny widths), plus the cached stores, neuron detail, induction and text views."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.cli import main
from interpscope.models.tokenizers import gpt2_tokenizer
from tests.tiny import neuron_model, plant_entropy_neuron

LAYER, INDEX = 1, 5


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A local folder with the planted model and its tokenizer; the data dir points at a fresh folder."""
    root = tmp_path_factory.mktemp("neurons")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    model = neuron_model("gpt2", vocab_size=50257, d_model=32, d_mlp=64, dtype=torch.float32, seed=0)
    plant_entropy_neuron(model, LAYER, INDEX, k=1, norm=30.0)
    folder = root / "tiny-entropy"
    model.save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    yield folder
    mp.undo()


def _run_json(capsys, argv: list[str]) -> dict:
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_cli_lists_the_planted_neuron_first(saved_model, capsys):
    result = _run_json(capsys, ["neurons", "--model", str(saved_model), "--top", "5", "--json"])
    assert result["layer"] == 1 and result["k"] == 1
    first = result["neurons"][0]
    assert (first["layer"], first["index"]) == (LAYER, INDEX)
    assert first["rho"] == pytest.approx(1.0, abs=1e-4) and first["logit_var"] < 1e-8
    assert first["norm"] == pytest.approx(30.0, rel=1e-4)
    rhos = [n["rho"] for n in result["neurons"]]
    assert rhos == sorted(rhos, reverse=True) and rhos[1] < 0.9
    assert all(isinstance(n["unigram_cosine"], float) for n in result["neurons"])
    layer0 = _run_json(capsys, ["neurons", "--model", str(saved_model), "--layer", "0", "--k", "3", "--top", "0",
                                "--json", "--no-unigram"])
    assert layer0["layer"] == 0 and layer0["k"] == 3 and len(layer0["neurons"]) == 64
    assert "unigram_cosine" not in layer0["neurons"][0]  # absent: no corpus was counted


def test_cli_ablation_direct_zero_total_clearly_nonzero(saved_model, capsys):
    result = _run_json(capsys, ["neurons", "ablate", "--model", str(saved_model), "--neurons", f"{LAYER}.{INDEX}",
                                "--tokens", "512", "--seq-len", "64", "--random", "4", "--mean-tokens", "512",
                                "--json"])
    assert result["n_tokens"] == 8 * 63
    planted = result["neurons"][0]
    assert planted["neuron"] == f"{LAYER}.{INDEX}" and not planted["is_random"]
    assert planted["loss_direct_abs"] < 1e-4 * planted["loss_total_abs"]
    assert planted["entropy_direct_abs"] < 1e-4 * planted["entropy_total_abs"]
    random_totals = [r["loss_total_abs"] for r in result["random"]]
    assert len(random_totals) == 4 and planted["loss_total_abs"] > 10 * max(random_totals)
    assert planted["norm_share"] == pytest.approx(1.0, abs=1e-3)
    assert planted["kl_unigram_ablated"] is not None and result["clean_kl_unigram"] > 0
    assert result["random_summary"]["loss_total_abs_mean"] == pytest.approx(np.mean(random_totals))


def test_cli_errors_are_one_line(saved_model, capsys):
    assert main(["neurons", "ablate", "--model", str(saved_model), "--neurons", "7.1"]) == 2
    assert "layer out of range" in capsys.readouterr().err
    assert main(["neurons", "--model", str(saved_model), "--layer", "5"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["neurons", "--model", str(saved_model), "--k", "32"]) == 2
    assert "k must be" in capsys.readouterr().err


def test_store_detail_text_and_induction(saved_model, monkeypatch):
    from interpscope.entropy_neurons import store as store_module
    from interpscope.entropy_neurons.cards import neuron_detail, text_activations
    from interpscope.entropy_neurons.induction import induction_study, repeated_sequences
    from interpscope.entropy_neurons.weights import neuron_stats
    from interpscope.models import load_model

    lm = load_model(str(saved_model))
    stores = store_module.activation_stores(lm, [LAYER], n_tokens=256, seq_len=32)
    store = stores[LAYER]
    assert store.activations.shape == (8, 32, 64) and store.tokens.shape == (8, 32)
    assert store.excluded.shape == (8, 32) and store.excluded[:, 0].all()
    kept = np.asarray(store.activations, dtype=np.float64)[~store.excluded]
    np.testing.assert_allclose(store.mean, kept.mean(0), atol=1e-3)

    def no_forward(*args, **kwargs):
        raise AssertionError("the store should come from the disk cache")

    monkeypatch.setattr(store_module, "run_layers", no_forward)
    again = store_module.activation_stores(lm, [LAYER], n_tokens=256, seq_len=32)[LAYER]
    np.testing.assert_array_equal(again.mean, store.mean)

    detail = neuron_detail(lm, LAYER, INDEX, k=1, store=store, top_contexts=5)
    assert detail.rho == pytest.approx(neuron_stats(lm.adapter, LAYER, 1).rho[INDEX], abs=1e-6)
    assert np.sum(detail.cosines ** 2) == pytest.approx(1.0, abs=1e-6)
    assert detail.singular_values[-1] < 1e-3 * detail.singular_values[0]  # the planted null direction
    assert detail.histogram_counts.sum() == kept.shape[0] == store.n_tokens - detail.excluded_tokens
    tops = [c.activation for c in detail.contexts]
    assert tops == sorted(tops, reverse=True) and tops[0] == pytest.approx(float(kept[:, INDEX].max()), rel=1e-3)
    assert all(c.position >= 1 for c in detail.contexts)
    assert len(detail.promoted) == 15 and detail.promoted[0].value >= detail.promoted[-1].value

    text = text_activations(lm, "It is a truth universally acknowledged, that a single man",
                            [f"{LAYER}.{INDEX}", "0.3"])
    assert text.activation.shape == (2, len(text.tokens)) and text.entropy.shape == (len(text.tokens),)
    assert np.all(text.entropy >= 0) and np.all((text.top_probability > 0) & (text.top_probability <= 1))

    tokens = repeated_sequences(lm.tokenizer, 50257, 3, 10, seed=1)
    assert tokens.shape == (3, 21) and torch.equal(tokens[:, 1:11], tokens[:, 11:])
    means = {LAYER: store.mean}
    study = induction_study(lm, [f"{LAYER}.{INDEX}"], n_sequences=3, half_len=10, n_random=3, means=means)
    assert study.activation.shape == (4, 20) and study.is_random == [False, True, True, True]
    assert np.isnan(study.entropy[-1]) and np.all(np.isfinite(study.entropy[:-1]))
    first, second = study.ablation_entropy_change_direct[f"{LAYER}.{INDEX}"]
    assert abs(first) < 1e-5 and abs(second) < 1e-5
    assert max(abs(v) for v in study.ablation_entropy_change[f"{LAYER}.{INDEX}"]) > 1e-4
