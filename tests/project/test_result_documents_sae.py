"""Issue 23.3 for the SAE, entropy-neuron and Fourier views: for every result type, the command line's --json, the
page's JSON export and the Python API's `to_dict()` are one document (timings aside), headed by its schema name and
version.

The page side is the page's own export: the Entropy neurons page runs under streamlit.testing with its export menu
recorded; for the other views the page's backend call, with the page's arguments, goes through the export menu's
JSON writer (components/export.py:data_json). Tiny models throughout (a GPT-2 with random SAEs, a GPT-2 with a
planted entropy neuron, a GPT-2 with planted Fourier features over a number tokenizer)."""
from __future__ import annotations

import json

import pytest
import torch

import interpscope.entropy_neurons
import interpscope.fourier
import interpscope.sae
from components.export import data_json
from interpscope.cli import main
from interpscope.models.loading import load_model
from interpscope.results import without_timings
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


def _cli(capsys, argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def _page(result) -> dict:
    return json.loads(data_json(result))


def assert_one_document(schema: str, cli: dict, page: dict, api: dict) -> None:
    """The three are equal without timings, carry the schema and version 1, and hold no null anywhere."""
    assert cli["schema"] == page["schema"] == api["schema"] == schema
    assert cli["schema_version"] == page["schema_version"] == api["schema_version"] == 1
    assert without_timings(cli) == without_timings(page) == without_timings(api)
    assert not _null_keys(api)  # a value that does not apply is absent, never null


def _null_keys(value, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [f"{path}.{k}" for k, v in value.items() if v is None] + [
            found for k, v in value.items() for found in _null_keys(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in _null_keys(v, f"{path}[{i}]")]
    return []


@pytest.fixture(scope="module")
def sae_setting(tmp_path_factory):
    """A tiny GPT-2 saved as a model folder, random SAEs after blocks 0 and 1, a feature store of the first, and the
    model as the command line loads it."""
    from interpscope.sae.store.build import build_store

    root = tmp_path_factory.mktemp("documents-sae")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    model_dir = save_tiny_lm(root / "model")
    lm = load_model(str(model_dir), device="cpu")
    up = random_sae_folder(tiny_lm(), root / "sae0")
    down = random_sae_folder(tiny_lm(), root / "sae1", hook="blocks.1.hook_resid_post", seed=5)
    store = build_store(lm, up, root / "store", n_tokens=512, context_size=64, batch_size=4)
    yield model_dir, lm, up, down, store
    mp.undo()


def test_features_on_a_text_are_one_document(sae_setting, capsys):
    from interpscope.sae import load_sae
    from interpscope.sae.store.prompt import prompt_features

    model_dir, lm, up, _, _ = sae_setting
    cli = _cli(capsys, ["sae", "prompt", "--sae", str(up), "--model", str(model_dir), "--text", TEXT, "--json"])
    page = _page(prompt_features(lm, load_sae(up), TEXT, 20))  # the prompt view's call (top 20, its default)
    api = interpscope.sae.features(lm, up, TEXT).to_dict()
    assert_one_document("interpscope.sae.features", cli, page, api)
    assert api["top_features"] and len(api["per_token"]) == len(api["tokens"]) == len(api["top_activations"])
    assert api["model"] == lm.name and api["hook"] == "blocks.0.hook_resid_post"


@pytest.mark.parametrize("mode", ["add", "ablate"])
def test_steering_is_one_document_and_ablation_has_no_strength(sae_setting, capsys, mode):
    from interpscope.sae import load_sae
    from interpscope.sae.store.steering import steer

    model_dir, lm, up, _, _ = sae_setting
    feature = interpscope.sae.features(lm, up, TEXT).top_features[0]
    cli = _cli(capsys, ["sae", "steer", "--sae", str(up), "--model", str(model_dir), "--text", TEXT, "--feature",
                        str(feature), "--mode", mode, "--strength", "40", "--tokens", "6", "--json"])
    page = _page(steer(lm, load_sae(up), TEXT, feature, mode, 40.0, 6))  # the Steering view's call
    api = interpscope.sae.steer(lm, up, feature, TEXT, mode=mode, strength=40.0, tokens=6).to_dict()
    assert_one_document("interpscope.sae.steering", cli, page, api)
    assert ("strength" in api) == (mode == "add")


def test_feature_card_is_one_document(sae_setting, capsys):
    from interpscope.sae.store import FeatureStore

    _, _, _, _, store = sae_setting
    feature = int(FeatureStore(store).density.argmax())
    cli = _cli(capsys, ["sae", "feature", "--store", str(store), "--id", str(feature), "--json"])
    page = _page(FeatureStore(store).card(feature))  # the feature page's card, as its export menu gets it
    api = interpscope.sae.feature(store, feature).to_dict()
    assert_one_document("interpscope.sae.feature", cli, page, api)
    assert api["id"] == feature and api["top_contexts"]


def test_circuit_is_one_document(sae_setting, capsys):
    from interpscope.sae import load_sae
    from interpscope.sae.circuits import feature_circuit

    model_dir, lm, up, _, _ = sae_setting
    cli = _cli(capsys, ["sae", "circuit", "--upstream", str(up), "--model", str(model_dir), "--text", TEXT,
                        "--json", "-"])
    page = _page(feature_circuit(lm, load_sae(up), None, TEXT))  # the Circuit view's call for the next token
    api = interpscope.sae.circuit(lm, up, None, None, TEXT).to_dict()
    assert_one_document("interpscope.sae.circuit", cli, page, api)
    assert "feature_relevance" not in api and api["nodes"] and api["edges"] and api["conservation"]
    assert "target_sae_biases" not in api["conservation"]  # a logit target has no target SAE
    assert main(["sae", "circuit", "--upstream", str(up), "--model", str(model_dir), "--text", TEXT]) == 0
    printed = capsys.readouterr().out
    assert "SAE biases" in printed and "target SAE" not in printed


def test_evaluation_is_one_document(sae_setting, capsys):
    from interpscope.sae import load_sae
    from interpscope.sae.evaluation import evaluate_sae

    model_dir, lm, up, _, _ = sae_setting
    cli = _cli(capsys, ["sae", "eval", "--sae", str(up), "--model", str(model_dir), "--tokens", "256", "--json"])
    page = _page(evaluate_sae(lm, load_sae(up), n_tokens=256))  # the overview page's call
    api = interpscope.sae.evaluate(lm, up, tokens=256).to_dict()
    assert_one_document("interpscope.sae.evaluation", cli, page, api)
    assert set(api["log10_density_histogram"]) == {"counts", "edges"} and "density" not in api


LAYER, INDEX = 1, 5


@pytest.fixture(scope="module")
def neuron_model(tmp_path_factory):
    """A tiny GPT-2 with a planted entropy neuron 1.5, saved as a model folder, and as the command line loads it."""
    from interpscope.models.tokenizers import gpt2_tokenizer
    from tests.tiny import neuron_model, plant_entropy_neuron

    root = tmp_path_factory.mktemp("documents-neurons")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    model = neuron_model("gpt2", vocab_size=50257, d_model=32, d_mlp=64, dtype=torch.float32, seed=0)
    plant_entropy_neuron(model, LAYER, INDEX, k=1, norm=30.0)
    folder = root / "tiny-entropy"
    model.save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    yield folder, load_model(str(folder), device="cpu")
    mp.undo()


def test_neuron_candidates_are_one_document_with_the_page_export(neuron_model, capsys, monkeypatch):
    """The page side is the Entropy neurons page itself, opened on the model, its export menu recorded."""
    from app import OTHER
    from components import export
    from tests.apptest_util import open_page

    folder, lm = neuron_model
    exported: dict[str, object] = {}
    monkeypatch.setattr(export, "export_menu", lambda fig, data, key, filename: exported.setdefault(key, data))
    at = open_page("pages/entropy_neurons.py", model_choice=OTHER, model_custom=str(folder))
    assert not at.exception, at.exception
    page = _page(exported["en-scatter"])
    cli = _cli(capsys, ["neurons", "--model", str(folder), "--top", "0", "--json"])
    api = interpscope.entropy_neurons.candidates(lm).to_dict()
    assert_one_document("interpscope.neurons.candidates", cli, page, api)
    assert len(api["neurons"]) == 64 and api["neurons"][0]["index"] == INDEX


def test_neuron_detail_is_one_document(neuron_model, capsys):
    from interpscope.entropy_neurons.page import neuron_card
    from interpscope.entropy_neurons.store import DEFAULT_STORE_TOKENS
    from interpscope.entropy_neurons.weights import default_k

    folder, lm = neuron_model
    cli = _cli(capsys, ["neurons", "detail", "--model", str(folder), "--neuron", f"{LAYER}.{INDEX}",
                        "--weights-only", "--json"])
    page = _page(neuron_card(lm, LAYER, INDEX, k=default_k(lm.adapter.d_model), n_tokens=DEFAULT_STORE_TOKENS))
    api = interpscope.entropy_neurons.detail(lm, f"{LAYER}.{INDEX}").to_dict()
    assert_one_document("interpscope.neurons.detail", cli, page, api)
    assert api["source"] == "weights only" and "excluded_tokens" not in api and "histogram_counts" not in api


def test_neuron_ablation_is_one_document(neuron_model, capsys):
    from interpscope.entropy_neurons import ablation as ablation_mod
    from interpscope.entropy_neurons.weights import default_k

    folder, lm = neuron_model
    spec = f"{LAYER}.{INDEX}"
    cli = _cli(capsys, ["neurons", "ablate", "--model", str(folder), "--neurons", spec, "--tokens", "256",
                        "--random", "2", "--mean-tokens", "256", "--json"])
    page = _page(ablation_mod.ablate(lm, [spec], n_tokens=256, n_random=2, k=default_k(lm.adapter.d_model),
                                     mean_tokens=256))  # the Causal ablation tab's call
    api = interpscope.entropy_neurons.ablate(lm, [spec], tokens=256, random=2, mean_tokens=256).to_dict()
    assert_one_document("interpscope.neurons.ablation", cli, page, api)
    assert [n["neuron"] for n in api["neurons"]] == [spec] and len(api["random"]) == 2
    assert set(api["random_summary"]) == {"loss_total_abs_mean", "loss_direct_abs_mean", "entropy_total_abs_mean",
                                          "entropy_direct_abs_mean"}
    lone = interpscope.entropy_neurons.ablate(lm, [spec], tokens=256, random=0, mean_tokens=256).to_dict()
    assert "random_summary" not in lone and lone["random"] == []  # no random neurons: no summary, not zeros


def test_fourier_spectrum_is_one_document(planted_folder, capsys):
    from interpscope.fourier.probe import default_numbers
    from interpscope.fourier.spectra import embedding_spectrum

    lm = load_model(str(planted_folder), device="cpu", dtype="float64")
    cli = _cli(capsys, ["fourier", "spectrum", "--model", str(planted_folder), "--dtype", "float64", "--json"])
    page = _page(embedding_spectrum(lm, default_numbers(lm), matrix="embedding"))  # the spectrum tab's call
    api = interpscope.fourier.spectrum(lm).to_dict()
    assert_one_document("interpscope.fourier.spectrum", cli, page, api)
    assert api["reading"] and api["outliers"] and "layer" not in api


def test_fourier_layer_spectra_are_one_document(planted_folder, capsys):
    from interpscope.fourier.probe import default_numbers
    from interpscope.fourier.spectra import hidden_spectra

    lm = load_model(str(planted_folder), device="cpu", dtype="float64")
    cli = _cli(capsys, ["fourier", "spectrum", "--all-layers", "--model", str(planted_folder), "--dtype", "float64",
                        "--json"])
    page = _page(hidden_spectra(lm, default_numbers(lm)))  # the spectrum tab's call for a model that splits digits
    api = interpscope.fourier.layer_spectra(lm)
    assert_one_document("interpscope.fourier.layer_spectra", cli, page, api.to_dict())
    assert cli["layer_names"] == ["embed", "layer 0", "layer 1"] and len(cli["magnitude"]) == 3
    assert [row["layer"] for row in api.table_rows()] == cli["layer_names"] and api.figure().layout.title.text
    assert cli["reading"]


def test_fourier_filter_table_is_one_document(planted_folder, capsys):
    from interpscope.fourier.probe import default_numbers, run_filters

    lm = load_model(str(planted_folder), device="cpu", dtype="float64")
    common = ["--model", str(planted_folder), "--dtype", "float64", "--tau", "10", "--prompts", "40",
              "--control-seeds", "2", "--json"]
    cli = _cli(capsys, ["fourier", "table", *common])
    page = _page(run_filters(lm, tau=10, prompts=40, numbers=default_numbers(lm), split="test", positions="last",
                             template="{a}+{b}=", control_seeds=2))  # the Filters tab's call
    api = interpscope.fourier.table(lm, tau=10, prompts=40, control_seeds=2).to_dict()
    assert_one_document("interpscope.fourier.filter_table", cli, page, api)
    assert len(api["rows"]) == 7 and api["split"] == "test"
    one_cli = _cli(capsys, ["fourier", "filter", "--kind", "high", "--modules", "mlp", *common])
    one_api = interpscope.fourier.filter(lm, "high", "mlp", tau=10, prompts=40, control_seeds=2).to_dict()
    assert without_timings(one_cli) == without_timings(one_api)
    assert [(r["kind"], r["modules"]) for r in one_api["rows"]] == [("none", "none"), ("high", "mlp")]


def test_every_result_has_a_table_and_the_page_figure(sae_setting, neuron_model):
    """tidy rows and the figure for the results above (the figure built by the page's own component)."""
    model_dir, lm, up, _, store = sae_setting
    view = interpscope.sae.features(lm, up, TEXT)
    card = interpscope.sae.feature(store, int(view.top_features[0]))
    stats = interpscope.entropy_neurons.candidates(neuron_model[1], top=5)
    for result in (view, card, stats):
        assert len(result.to_frame()) > 0
        assert result.figure().layout.title.text
        assert "<div" in result._repr_html_()
    assert len(stats.to_frame()) == 5


def test_the_namespaces_load_lazily():
    """Importing interpscope.sae / .neurons / .fourier imports no model code, and every advertised name resolves."""
    import subprocess
    import sys

    code = ("import sys, interpscope.sae, interpscope.entropy_neurons, interpscope.fourier; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "[getattr(m, n) for m in (interpscope.sae, interpscope.entropy_neurons, interpscope.fourier) "
            "for n in m.__all__]; "
            "assert callable(interpscope.entropy_neurons.candidates) and callable(interpscope.fourier.spectrum); "
            "import interpscope.entropy_neurons.ranking, interpscope.fourier.spectra; "
            "assert callable(interpscope.entropy_neurons.detail) and callable(interpscope.fourier.spectrum)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for module in (interpscope.sae, interpscope.entropy_neurons, interpscope.fourier):
        assert sorted(module.__all__) == sorted(module._LAZY)
