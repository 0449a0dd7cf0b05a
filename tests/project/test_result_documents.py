"""One result, one document (issue 23.2-3): for every core result type the CLI's --json, the page's JSON export and
the Python API's `to_dict()` are the same document, timings aside; a value that does not apply is absent.

The page's export is read where the page hands it over: `export_menu(fig, data, key, ...)` is recorded (and still
runs), and its `data` goes through `data_json`, the function the JSON button calls.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pandas as pd
import plotly.graph_objects as go
import pytest

import interpscope
from components.export import data_csv
from interpscope.cli import main
from interpscope.results import without_timings
from tests.apptest_util import open_page

RELEVANCE_TEXT = "Mr. Darcy looked at Elizabeth, and Elizabeth looked back at"  # the relevance page's default
FLOW_TEXT = "When Mary and John went to the store, John gave a drink to"  # the flow page's default
SHORT = "The capital of France is"


def cli_document(capsys, *argv: str) -> dict:
    """Run `interpscope ARGV` in-process and read the JSON it printed to stdout."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def same(*documents, keys=("seconds",)) -> None:
    first = without_timings(documents[0], keys)
    for other in documents[1:]:
        assert without_timings(other, keys) == first


def has_key(document, key: str) -> bool:
    if isinstance(document, dict):
        return key in document or any(has_key(v, key) for v in document.values())
    if isinstance(document, list):
        return any(has_key(v, key) for v in document)
    return False


# --- the package itself --------------------------------------------------------------------------------------------

def test_import_is_cheap_and_lists_the_api(tmp_path):
    code = ("import sys, interpscope; assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "assert dir(interpscope) == sorted(interpscope.__all__); "
            "[getattr(interpscope, name) for name in interpscope.__all__]; "
            "import interpscope.predict; assert callable(interpscope.predict) and interpscope.predict.__module__ == "
            "'interpscope.api'; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert {"load", "predict", "explain", "flow", "methods", "LoadedModel"} <= set(interpscope.__all__)
    from interpscope.relevance.methods import METHODS

    assert interpscope.methods() == list(METHODS) and "attnlrp" in METHODS and "mambalrp" in METHODS


def test_models_document(capsys):
    document = cli_document(capsys, "models", "--json")
    assert document == interpscope.list_models().to_dict()
    assert document["schema"] == "interpscope.models" and document["schema_version"] == 1
    assert {"name": "smollm2-135m", "family": "llama", "source": "bundled"}.items() <= document["models"][0].items()


# --- tiny models: the documents' shape, without the bundled model ---------------------------------------------------

def test_tiny_documents_have_their_schema_table_and_figure():
    from tests.flow.test_flow import PROMPT, tiny
    from tests.tiny import tiny_llama

    lm = tiny(tiny_llama)
    prediction = interpscope.predict(lm, PROMPT, top=3)
    document = prediction.to_dict()
    assert (document["schema"], document["schema_version"]) == ("interpscope.prediction", 2)
    assert {"text", "tokens", "token_ids", "predictions", "entropy", "seconds"} <= set(document)
    assert set(document["predictions"][0]) == {"token", "id", "prob", "logit"}
    frame = pd.read_csv(io.BytesIO(data_csv(prediction)))  # the CSV names its columns as the JSON does
    assert {"id", "prob", "logit"} <= set(frame.columns) and not {"token_id", "probability"} & set(frame.columns)
    assert list(prediction.to_frame()["prob"]) == pytest.approx([p["prob"] for p in document["predictions"]])
    assert isinstance(prediction.figure(), go.Figure) and "<div" in prediction._repr_html_()

    relevance = interpscope.explain(lm, PROMPT, "gradxinput")
    document = relevance.to_dict()
    assert document["schema"] == "interpscope.relevance" and document["target"]["token_id"] >= 0
    assert "conservation" not in document and "completeness" not in document and "latent" not in document
    assert "contrast_id" not in document["target"]  # not a contrast: absent, not null
    assert isinstance(relevance.figure(), go.Figure) and len(relevance.to_frame()) == len(relevance.tokens)
    lrp = interpscope.explain(lm, PROMPT, "attnlrp").to_dict()
    assert "softmax_sum" in lrp["conservation"] and len(lrp["conservation"]["softmax_by_layer"]) > 0

    flow = interpscope.flow(lm, PROMPT, threshold=0.0)
    document = flow.to_dict()
    assert document["schema"] == "interpscope.flow" and document["threshold"] == 0.0
    assert "attention_contribution" not in document["steps"][0]  # the embeddings step has no block
    assert {"attention_contribution", "mlp_contribution"} <= set(document["steps"][1])
    assert len(flow.at(1.0).to_dict()["nodes"]) < len(document["nodes"])
    assert all(isinstance(f, go.Figure) for f in (flow.figure(), flow.lens_figure(), flow.contributions_figure()))


def test_explain_takes_each_methods_own_options():
    """interpscope.explain passes a method's declared options through (no fixed keyword list), checks them, and
    refuses an unknown one."""
    from interpscope.config import InterpscopeError
    from tests.flow.test_flow import PROMPT, tiny
    from tests.tiny import tiny_llama

    lm = tiny(tiny_llama)
    coarse = interpscope.explain(lm, PROMPT, "ig", ig_steps=2, baseline="mean")
    fine = interpscope.explain(lm, PROMPT, "ig", ig_steps=16, baseline="mean")
    assert coarse.to_dict()["completeness"] != fine.to_dict()["completeness"]
    assert "mean" in str(coarse.to_dict())
    with pytest.raises(InterpscopeError, match="IG steps"):
        interpscope.explain(lm, PROMPT, "ig", ig_steps=0)
    with pytest.raises(InterpscopeError, match="nknown"):
        interpscope.explain(lm, PROMPT, "ig", no_such_option=3)


def test_a_tiny_mamba_map_has_no_softmax_share():
    from tests.flow.test_flow import PROMPT, tiny
    from tests.tiny import tiny_mamba

    lm = tiny(tiny_mamba)
    result = interpscope.explain(lm, PROMPT)  # the family's LRP method
    assert result.method == "mambalrp" and result.conservation.softmax_sum is None
    conservation = result.to_dict()["conservation"]
    assert {"input_sum", "bias_sum", "relative_error", "target_logit"} <= set(conservation)
    assert not {"softmax_sum", "softmax_by_layer", "gap_without_softmax"} & set(conservation)
    assert conservation["relative_error"] < 1e-3


# --- the bundled models: CLI == page == API -------------------------------------------------------------------------

@pytest.mark.bundled
def test_prediction_is_one_document(capsys, exports, bundled_lm):
    cli = cli_document(capsys, "predict", "--text", SHORT, "--top", "10", "--json")
    at = open_page("pages/home.py")
    at.text_area(key="home-text").input(SHORT).run()
    assert not at.exception, at.exception
    api = interpscope.predict(bundled_lm, SHORT, top=10).to_dict()
    page = exports["home-prediction"]
    same(cli, page, api)
    assert cli["text"] == SHORT and "logit" in cli["predictions"][0] and "seconds" in cli


@pytest.mark.bundled
def test_relevance_map_is_one_document(capsys, exports, bundled_lm):
    cli = cli_document(capsys, "explain", "--text", RELEVANCE_TEXT, "--method", "attnlrp", "--json", "-")
    at = open_page("pages/relevance.py")
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.explain(bundled_lm, RELEVANCE_TEXT, method="attnlrp").to_dict()
    same(cli, exports["map-first"], api)
    assert cli["schema"] == "interpscope.relevance" and "softmax_sum" in cli["conservation"]
    assert cli["target"]["token_id"] == cli["top"][0]["id"]


@pytest.mark.bundled
def test_a_mamba_map_is_one_document_without_a_softmax_share(capsys, exports):
    lm = interpscope.load("mamba-tiny", device="cpu")
    cli = cli_document(capsys, "explain", "--model", "mamba-tiny", "--device", "cpu", "--text", RELEVANCE_TEXT,
                       "--json", "-")
    at = open_page("pages/relevance.py", model_choice="mamba-tiny")
    at.button(key="relevance-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.explain(lm, RELEVANCE_TEXT).to_dict()
    same(cli, exports["map-first"], api)
    assert cli["method"] == "mambalrp" and "input_sum" in cli["conservation"]
    for key in ("softmax_sum", "softmax_by_layer", "gap_without_softmax"):
        assert not has_key(cli, key)


@pytest.mark.bundled
def test_flow_is_one_document(capsys, exports, bundled_lm):
    cli = cli_document(capsys, "flow", "--text", FLOW_TEXT, "--json", "-")
    at = open_page("pages/flow.py")
    at.button(key="flow-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.flow(bundled_lm, FLOW_TEXT).to_dict()
    same(cli, exports["flow-lens"], exports["flow-contrib"], exports["flow-graph"], api)
    assert cli["schema"] == "interpscope.flow" and cli["threshold"] == 0.05 and cli["nodes"] and cli["steps"]


@pytest.mark.bundled
def test_faithfulness_curves_are_one_document(capsys, exports, bundled_lm):
    cli = cli_document(capsys, "explain", "--faithfulness", "--text", SHORT, "--method", "gradxinput", "--json", "-")
    api = interpscope.faithfulness(bundled_lm, interpscope.explain(bundled_lm, SHORT, "gradxinput")).to_dict()
    same(cli, api)
    assert cli["schema"] == "interpscope.faithfulness" and cli["bos_kept"] is True
    at = open_page("pages/relevance.py", **{"relevance-text": SHORT})
    at.button(key="relevance-run").click().run()
    at.button(key="relevance-faith").click().run()
    assert not at.exception, at.exception
    comparison = interpscope.compare_faithfulness(bundled_lm, SHORT).to_dict()
    every = cli_document(capsys, "explain", "--faithfulness", "--compare", "--text", SHORT, "--json", "-")
    same(exports["curves"], comparison, every)
    assert comparison["schema"] == "interpscope.faithfulness_comparison"
    gradxinput = next(c for c in comparison["curves"] if c["method"] == "gradxinput")
    assert without_timings(gradxinput) == without_timings({k: v for k, v in cli.items()
                                                           if k not in ("schema", "schema_version")})


@pytest.mark.bundled
def test_heldout_table_is_one_document(capsys, exports, bundled_lm, tmp_path):
    """On a tiny Llama with the bundled tokenizer, saved as a folder (the held-out set's expected tokens are single
    tokens of that tokenizer, and it has a pad token: every baseline runs), opened by path in all three: the
    document's equality does not depend on the model's size."""
    from tests.tiny import tiny_llama

    folder = tmp_path / "tiny-llama"
    tiny_llama(vocab=len(bundled_lm.tokenizer)).save_pretrained(folder)
    bundled_lm.tokenizer.save_pretrained(folder)
    timings = ("seconds", "cpu_seconds")
    cli = cli_document(capsys, "explain", "--faithfulness", "--set", "heldout", "--limit", "1", "--curve-steps", "5",
                       "--ig-steps", "8", "--model", str(folder), "--device", "cpu", "--json", "-")
    at = open_page("pages/relevance.py", model_choice="Other: Hugging Face id or local folder…",
                   model_custom=str(folder), device="cpu",
                   **{"relevance-file-source": "heldout", "relevance-file-set-n": 1})
    at.button(key="relevance-file-set-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.heldout(interpscope.load(str(folder), device="cpu"), limit=1, curve_steps=5).to_dict()
    same(cli, exports["relevance-file-set-export"], api, keys=timings)
    assert cli["schema"] == "interpscope.heldout_faithfulness" and cli["table"]
    assert set(cli["settings"]["baselines"]) == {"zero", "pad", "mean"}


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory) -> str:
    """A tiny GPT-2 saved as a local model folder: what the sidebar, --model and interpscope.load open by path."""
    from tests.sae_store_tiny import save_tiny_lm

    return str(save_tiny_lm(tmp_path_factory.mktemp("documents") / "tiny-gpt2"))


def test_ig_convergence_is_one_document(capsys, exports, tiny_model_folder):
    """On a tiny GPT-2 opened by path (248 gradient passes per run, three runs: the document's equality does not
    depend on the model's size); the CLI's --model is that folder, so equal documents mean the page used it too."""
    sidebar = {"model_choice": "Other: Hugging Face id or local folder…", "model_custom": tiny_model_folder,
               "device": "cpu"}
    at = open_page("pages/relevance.py", **sidebar, **{"relevance-text": SHORT, "relevance-method": "ig"})
    at.button(key="relevance-run").click().run()
    at.button(key="relevance-ig-run").click().run()
    assert not at.exception, at.exception
    api = interpscope.ig_convergence(interpscope.load(tiny_model_folder, device="cpu"), SHORT)
    cli = cli_document(capsys, "explain", "--ig-convergence", "--model", tiny_model_folder, "--device", "cpu",
                       "--text", SHORT, "--json", "-")
    same(exports["ig-convergence"], api.to_dict(), cli)
    assert api.to_dict()["schema"] == "interpscope.ig_convergence"
    assert list(api.to_frame()["steps"]) == [r["steps"] for r in api.rows]


@pytest.mark.bundled
def test_batch_faithfulness_is_one_document(capsys, exports, bundled_lm, tmp_path):
    data = b"She smiled at\nHe walked to the\n"
    path = tmp_path / "batch.txt"
    path.write_bytes(data)
    at = open_page("pages/relevance.py", **{"relevance-text": SHORT})
    at.button(key="relevance-run").click().run()  # the batch section sits under a computed map
    at.radio(key="relevance-batch-source").set_value("Upload a file").run()
    at.file_uploader(key="relevance-batch-upload").set_value(("batch.txt", data, "text/plain")).run()
    at.multiselect(key="relevance-batch-methods").set_value(["attnlrp", "cplrp"]).run()
    at.button(key="relevance-batch-run").click().run()
    assert not at.exception, at.exception
    from interpscope.relevance.api import faithfulness_batch

    api = faithfulness_batch(bundled_lm, ["She smiled at", "He walked to the"], ["attnlrp", "cplrp"]).to_dict()
    cli = cli_document(capsys, "explain", "--file", str(path), "--all-rows", "--faithfulness", "--methods", "attnlrp",
                       "cplrp", "--json", "-")
    same(exports["batch"], api, cli)
    assert cli["schema"] == "interpscope.faithfulness_batch" and cli["n_texts"] == 2
    assert set(cli["mean_abpc"]) == {"attnlrp", "cplrp"}


@pytest.mark.bundled
def test_whole_file_attribution_is_one_document(capsys, exports, bundled_lm, tmp_path):
    data = b"The capital of France is\nElizabeth walked to the\n"
    path = tmp_path / "rows.txt"
    path.write_bytes(data)
    code = main(["explain", "--file", str(path), "--all-rows", "--out", str(tmp_path / "cli"), "--method",
                 "gradxinput"])
    capsys.readouterr()
    assert code == 0
    cli = json.loads((tmp_path / "cli" / "aggregates.json").read_text())
    at = open_page("pages/relevance.py", **{"relevance-file-source": "upload"})
    at.file_uploader(key="relevance-file-upload").set_value(("rows.txt", data, "text/plain")).run()
    at.selectbox(key="relevance-file-method").set_value("gradxinput").run()
    at.button(key="relevance-file-run").click().run()
    assert not at.exception, at.exception
    run = interpscope.explain_file(bundled_lm, path, "gradxinput")  # the page's folder: resumes its finished run
    same(cli, exports["relevance-file-by-token"], exports["relevance-file-by-distance"], run.aggregates().to_dict())
    same(exports["relevance-file-tidy"], run.to_dict())
    assert cli["schema"] == "interpscope.file_aggregates" and cli["method"] == "Gradient x Input"
    assert run.to_dict()["schema"] == "interpscope.file_attribution" and len(run.rows) == 2
