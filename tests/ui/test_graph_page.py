"""The attribution-graph page on a tiny Llama folder with random transcoders (streamlit.testing): Run builds a graph
whose export is the CLI's document, selecting nodes makes a supernode and an intervention shows predicted beside
actual, and bad inputs get clear messages."""
from __future__ import annotations

import json

import pytest
import torch

from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.results import without_timings
from tests.apptest_util import open_page

TEXT = "The cat sat on the mat and the dog"
OTHER = "Other: Hugging Face id or local folder…"
WIDTH = 24


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, initializer_range=0.3)
    folder = tmp_path_factory.mktemp("graph-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return str(folder)


def open_graph(folder: str, **state):
    return open_page("pages/graphs.py", model_choice=OTHER, model_custom=folder, device="cpu",
                     **{"graph-text": TEXT, "graph-source": "random", "graph-width": WIDTH, "graph-nodes": 20,
                        "graph-edges": 60, **state})


def test_run_builds_the_graph_and_its_export_is_the_clis(llama_folder, exports, capsys):
    at = open_graph(llama_folder)
    assert not at.exception, at.exception
    assert any("Press **Run**" in i.value for i in at.info)
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    doc = exports["graph"]
    assert doc["schema"] == "interpscope.graph" and doc["text"] == TEXT
    kinds = {n["kind"] for n in doc["nodes"]}
    assert {"embedding", "feature", "logit"} <= kinds
    assert any(m.label.startswith("Replacement score") for m in at.metric)
    # the CLI over the same random transcoders (saved as a set folder) gives the same document
    import interpscope
    from interpscope.cli import main
    from interpscope.sae.transcoder_set import random_transcoder_set, save_transcoder_set

    lm = interpscope.load(llama_folder, device="cpu")
    folder = save_transcoder_set(random_transcoder_set(lm, WIDTH, seed=0), f"{llama_folder}/tc", dtype="float32")
    capsys.readouterr()
    assert main(["graph", "--model", llama_folder, "--device", "cpu", "--text", TEXT, "--node-budget", "20",
                 "--edge-budget", "60", "--transcoders", str(folder), "--json", "-"]) == 0
    cli = json.loads(capsys.readouterr().out)
    ignore = ("transcoders",)  # the set's name: "random" in the page, the folder on the command line
    assert without_timings({k: v for k, v in cli.items() if k not in ignore}) == \
        without_timings({k: v for k, v in doc.items() if k not in ignore})


def test_select_group_and_intervene(llama_folder, exports):
    at = open_graph(llama_folder)
    at.button(key="graph-run").click().run()
    doc = exports["graph"]
    features = [n["id"] for n in doc["nodes"] if n["kind"] == "feature"][:2]
    assert len(features) == 2
    # a box selection, as the figure's event would report it
    at.session_state["_graph-selected"] = list(features)
    at.run()
    assert not at.exception, at.exception
    at.button(key="graph-make-group").click().run()
    assert not at.exception, at.exception
    assert any("manual-0" in str(df.value) for df in at.dataframe)
    at.selectbox(key="graph-pick").select(features[0]).run()
    at.button(key="graph-intervene").click().run()
    assert not at.exception, at.exception
    result = exports["graph-intervention"]
    assert result["schema"] == "interpscope.graph.intervention" and result["nodes"] == [features[0]]
    shown = " ".join(m.value for m in at.markdown)
    assert f"{result['actual']:+.3f} in the real model" in shown and f"predicts {result['predicted']:+.3f}" in shown
    # the edge split names a head from the numbers beside it
    heads = exports["graph-edge-heads"]  # the selected node's strongest edge, split by head
    assert heads["schema"] == "interpscope.graph.edge_heads" and heads["heads"]
    top = heads["heads"][0]
    assert f"Head L{top['layer']}.H{top['head']}" in shown
    # why that head attends there: its score split over the query and key sides, the check beside it
    at.button(key="graph-qk").click().run()
    assert not at.exception, at.exception
    qk = exports["graph-qk-export"]
    assert qk["schema"] == "interpscope.graph.qk_attribution" and (qk["layer"], qk["head"]) == (top["layer"],
                                                                                                top["head"])
    assert abs(qk["difference"]) <= 1e-4 * max(1.0, abs(qk["score"]))
    assert f"sum to {qk['total']:+.4g}" in " ".join(m.value for m in at.markdown)
    at.button(key="graph-check").click().run()
    assert not at.exception, at.exception
    check = exports["graph-check"]
    assert check["schema"] == "interpscope.graph.ablation_check"
    assert {row["set"] for row in check["rows"]} == {"strongest", "random"}  # the control is there
    shown = " ".join(m.value for m in at.markdown)
    assert (f"r = {check['r']:.2f}" if "r" in check else "undefined") in shown
    at.radio(key="graph-group").set_value("decoder").run()
    assert not at.exception, at.exception
    assert any("decoder cosine" in str(df.value) for df in at.dataframe)


def test_top_logit_nodes_from_the_page(llama_folder, exports):
    """'Logit nodes' 3 covering p 1: three logit nodes in the export (the target first, marked), their table on the
    page with each row's contributions sum, the settings in the URL; back to 1 gives the one-logit document."""
    at = open_graph(llama_folder, **{"graph-logits": 3, "graph-cover": 1.0})
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    doc = exports["graph"]
    logits = [n for n in doc["nodes"] if n["kind"] == "logit"]
    assert len(logits) == 3 == len(doc["logits"]) and [n["target"] for n in logits] == [True, False, False]
    assert doc["logits"][0]["id"] == doc["target"]["id"]
    assert "**3 logit nodes**" in " ".join(m.value for m in at.markdown)
    covered = sum(e["probability"] for e in doc["logits"])  # three nodes short of the asked 1.0: said as it is
    assert any(f"3 logit nodes (the target first) cover p = {covered:.3f}" in c.value for c in at.caption)
    table = next(df.value for df in at.dataframe if "contributions sum" in df.value.columns)
    assert list(table["id"]) == [e["id"] for e in doc["logits"]] and list(table["target"]) == [True, False, False]
    assert at.query_params.get("logits") in ("3", ["3"])
    at.number_input(key="graph-logits").set_value(1).run()
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    assert "logits" not in exports["graph"] and sum(n["kind"] == "logit" for n in exports["graph"]["nodes"]) == 1


@pytest.mark.parametrize("state, message", [
    ({"graph-text": "   "}, "empty"),
    ({"graph-target": " two tokens here"}, "token"),
    ({"graph-source": "folder", "graph-folder": "/nonexistent/set"}, "No transcoder set folder"),
])
def test_bad_inputs_get_a_clear_message(llama_folder, state, message):
    at = open_graph(llama_folder, **state)
    if not at.warning:
        at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    said = " ".join(x.value for x in [*at.warning, *at.error])
    assert message.lower() in said.lower(), said


def _open_link(params: dict):
    """The graph page opened from a link carrying `params` (the model too: a folder, by its path)."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import APP, ROOT

    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(params)
    at.run()  # the sidebar takes the link's model (a page is switched to only after a first run)
    at.query_params.clear()
    at.query_params.update(params)
    at.switch_page(str(ROOT / "pages/graphs.py"))
    return at.run()


def test_selection_and_supernodes_round_trip_through_the_url(llama_folder, exports):
    """Issue 45.13: the graph's selection, the node shown and the supernodes made by hand are in the URL, and the
    link brings them back on the graph it rebuilds."""
    at = open_graph(llama_folder)
    at.button(key="graph-run").click().run()
    ids = [n["id"] for n in exports["graph"]["nodes"] if n["kind"] == "feature"][:3]
    assert len(ids) == 3
    at.session_state["_graph-selected"] = ids[:2]  # a box selection, as the figure's event would report it
    at.run()
    at.button(key="graph-make-group").click().run()
    at.session_state["_graph-selected"] = [ids[2]]
    at.run()
    assert not at.exception, at.exception
    link = {k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert link["select"] == ids[2] and link["node"] == ids[2] and link["supernodes"] == ",".join(ids[:2]), link
    again = _open_link(link)
    assert not again.exception, again.exception
    assert again.selectbox(key="graph-node").value == ids[2]
    table = next(df.value for df in again.dataframe if "supernode" in df.value.columns)
    assert list(table["supernode"]) == ["manual-0"] and list(table["members"]) == [2]
    assert not [w.value for w in again.warning]
    back = {k: v[0] if isinstance(v, list) else v for k, v in again.query_params.items()}
    assert back == link
    # a link naming nodes the graph lacks says so and keeps the rest
    other = _open_link({**link, "select": f"{ids[2]},F9_9_9"})
    assert other.selectbox(key="graph-node").value == ids[2]
    assert any("F9_9_9" in w.value for w in other.warning)


@pytest.fixture
def exported_figures(monkeypatch) -> dict:
    """export key -> the figure the page hands its export menu (what PNG/SVG/PDF render)."""
    import sys

    from components import export

    recorded: dict = {}
    original = export.export_menu

    def recording(fig, data, key, filename):
        recorded[key] = fig
        return original(fig, data, key, filename)

    monkeypatch.setattr(export, "export_menu", recording)
    for name, module in list(sys.modules.items()):
        if (name == "pages" or name.startswith(("pages.", "components."))) and \
                getattr(module, "export_menu", None) is not None:
            monkeypatch.setattr(module, "export_menu", recording)
    return recorded


def test_the_exported_graph_has_the_edge_legend_and_no_selection(llama_folder, exports, exported_figures):
    """Issue 45.11: the exported PNG carried this session's selection outline and had no legend for the edges'
    colours."""
    at = open_graph(llama_folder)
    at.button(key="graph-run").click().run()
    feature = next(n["id"] for n in exports["graph"]["nodes"] if n["kind"] == "feature")
    at.session_state["_graph-selected"] = [feature]
    at.run()
    assert not at.exception, at.exception
    shown = json.loads(next(c.proto.spec for c in at.get("plotly_chart") if "Attribution graph of" in c.proto.spec))
    outlines = [c for t in shown["data"] for c in (t.get("marker", {}).get("line", {}).get("color") or [])
                if isinstance(c, str)]
    assert "#1a9850" in outlines  # the page outlines the selected node
    fig = exported_figures["graph"]
    exported = [c for t in fig.data if t.marker is not None and t.marker.line is not None
                and isinstance(t.marker.line.color, (list, tuple)) for c in t.marker.line.color]
    assert "#1a9850" not in exported  # the export does not
    legend = {t.name for t in fig.data if t.showlegend}
    assert {"edge +: raises its target", "edge −: lowers its target"} & legend, legend
    colours = {t.line.color for t in fig.data if t.showlegend and t.name and t.name.startswith("edge")}
    assert colours <= {"#d6604d", "#4393c3"}  # the legend's colours are the edges' own


def test_a_contrast_and_a_list_of_targets_from_the_page(llama_folder, exports):
    """'Rather than' explains the logit difference (the export carries the contrast, the header says what is
    explained, the URL keeps it); a '|'-separated list makes those logit nodes, the first the target."""
    at = open_graph(llama_folder, **{"graph-target": " the", "graph-contrast": " a"})
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    doc = exports["graph"]
    assert doc["target"]["token"] == " the" and doc["target"]["contrast"]["token"] == " a"
    assert any("rather than ' a'" in m.value and "logit difference" in m.value for m in at.markdown)
    assert at.query_params.get("contrast") in (" a", [" a"])
    at = open_graph(llama_folder, **{"graph-targets": " the| a| dog"})
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    doc = exports["graph"]
    assert [e["token"] for e in doc["logits"]] == [" the", " a", " dog"] and doc["target"]["token"] == " the"


def test_circuit_tracers_convention_from_the_page(llama_folder, exports):
    """The Convention choice builds circuit-tracer's graph (the export names it and what is in no node, the header
    says the demeaned logit and the left-out part, the URL keeps it); interventions are not offered on it."""
    at = open_graph(llama_folder, **{"graph-convention": "circuit-tracer"})
    at.button(key="graph-run").click().run()
    assert not at.exception, at.exception
    doc = exports["graph"]
    assert doc["convention"] == "circuit-tracer" and set(doc["left_out"]) == {"b_dec", "bos", "total"}
    assert doc["logit_inputs_sum"] + doc["left_out"]["total"] == pytest.approx(doc["logit"], rel=1e-4, abs=1e-6)
    assert any("demeaned logit" in m.value and "in no node" in m.value for m in at.markdown)
    assert at.query_params.get("convention") in ("circuit-tracer", ["circuit-tracer"])
    assert any("choose Interpscope's convention" in c.value for c in at.caption)
    assert not [b for b in at.button if b.key == "graph-check"]  # no ablation check on this graph
