"""The Entropy neurons page under streamlit.testing: every view, on a saved tiny model with a planted entropy
neuron (fast, and its answers are known), and the weight views on the bundled SmolLM2."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch

from interpscope.models.tokenizers import gpt2_tokenizer
from tests.apptest_util import open_page
from tests.tiny import neuron_model, plant_entropy_neuron

PAGE = "pages/entropy_neurons.py"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("neurons-page")
    mp = pytest.MonkeyPatch()
    mp.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    model = neuron_model("gpt2", vocab_size=50257, d_model=32, d_mlp=64, dtype=torch.float32, seed=0)
    plant_entropy_neuron(model, 1, 5, k=1, norm=30.0)
    folder = root / "tiny-entropy"
    model.save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    yield folder
    mp.undo()


@pytest.fixture(scope="module")
def page(tiny_folder):
    from app import OTHER

    at = open_page(PAGE, model_choice=OTHER, model_custom=str(tiny_folder), **{"en-store-tokens": 256})
    assert not at.exception, at.exception
    return at


def values(data) -> list:
    """Plotly 6 sends numpy arrays as {"dtype", "bdata"(base64), "shape"}: decode them to a list."""
    if isinstance(data, dict) and "bdata" in data:
        array = np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]))
        return array.reshape([int(v) for v in str(data.get("shape", len(array))).split(",")]).tolist()
    return list(data)


def charts(at) -> dict[str, dict]:
    """Plotly figures on the page by title."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def chart(at, starts: str) -> dict:
    found = [spec for title, spec in charts(at).items() if title.startswith(starts)]
    assert found, f"no chart titled {starts!r}; have {list(charts(at))}"
    return found[0]


def test_candidates_view(page):
    spec = chart(page, "Layer 1 neurons")
    assert len(values(spec["data"][0]["x"])) == 64
    assert spec["layout"]["yaxis"]["type"] == "log"
    assert "rho" in spec["data"][0]["marker"]["colorbar"]["title"]["text"]
    assert spec["layout"]["annotations"][0]["text"] == "1.5"  # the planted neuron is the first default choice
    table = page.dataframe[0].value
    assert len(table) == 64 and table["neuron"].iloc[0] == "1.5" and table["rho"].iloc[0] > 0.999
    assert page.text_input(key="en-neurons").value.startswith("1.5")


def view(page, name: str):
    page.segmented_control(key="en-view").set_value(name).run()
    assert not page.exception, page.exception
    return page


def test_only_the_chosen_view_runs(page):
    view(page, "Candidates")
    assert not any(title.startswith("W_U singular spectrum") for title in charts(page))
    assert page.query_params.get("view") in (None, "Candidates")
    view(page, "Neuron detail")
    assert page.query_params["view"] == "Neuron detail"
    assert not any(title.startswith("Layer 1 neurons") for title in charts(page))


def test_neuron_detail_view(page):
    view(page, "Neuron detail")
    page.selectbox(key="en-detail-neuron").set_value("1.5").run()
    spec = chart(page, "W_U singular spectrum")
    cosines = values(spec["data"][0]["y"])
    assert cosines[-1] > 0.999  # all of the planted neuron sits in the bottom singular direction
    assert chart(page, "Tokens neuron 1.5")
    page.button(key="en-detail-run").click().run()
    assert not page.exception, page.exception
    hist = chart(page, "Activation of neuron 1.5")
    assert sum(values(hist["data"][0]["y"])) == 256 - 2  # two 128-token windows, position 0 of each left out
    contexts = [df.value for df in page.dataframe if "context" in df.value.columns][0]
    assert len(contexts) == 10 and contexts["context"].str.contains(r"\[\[").all()
    assert not contexts["context"].str.startswith("[[").any()  # real left context: never a window's first token
    assert any("attention-sink tokens" in c.value for c in page.caption)


def test_causal_ablation_view(page):
    view(page, "Causal ablation")
    page.number_input(key="en-abl-tokens").set_value(256)
    page.number_input(key="en-abl-random").set_value(3)
    page.text_input(key="en-neurons").input("1.5").run()
    page.button(key="en-abl-run").click().run()
    assert not page.exception, page.exception
    bars = chart(page, "Mean |change in loss|")
    assert bars["data"][0]["x"][0] == "1.5" and len(values(bars["data"][0]["x"])) == 4
    table = [df.value for df in page.dataframe if "norm share" in df.value.columns][0]
    planted = table[table["neuron"] == "1.5"].iloc[0]
    assert planted["|Δloss| direct"] < 1e-4 * planted["|Δloss| total"] and planted["norm share"] > 0.999
    assert chart(page, "Null-space fraction rho vs norm-mediated share")
    scatter = chart(page, "Per token: activation of 1.5")
    assert len(values(scatter["data"][0]["x"])) == 2 * 127  # two 128-token windows, the last token has no target
    captions = " ".join(c.value for c in page.caption)  # 45.9: the sentence speaks of what the chart shows
    total = table["|Δloss| total"]
    loss = float(total[~table["random"]].mean()) / float(total[table["random"]].mean())
    assert f"move the loss {loss:.1f}x as much as random neurons" in captions and "move the entropy" not in captions
    page.radio(key="en-abl-quantity").set_value("entropy").run()
    assert chart(page, "Mean |change in entropy|")
    captions = " ".join(c.value for c in page.caption)
    assert "move the entropy" in captions and "move the loss" not in captions


def test_token_frequency_view(page):
    view(page, "Token-frequency neurons")
    assert chart(page, "Cosine of each layer-1 neuron")
    top = [df.value for df in page.dataframe if "unigram_cosine" in df.value.columns and len(df.value) == 20][0]
    assert top["unigram_cosine"].abs().is_monotonic_decreasing
    page.number_input(key="en-tf-tokens").set_value(128)
    page.button(key="en-tf-run").click().run()
    assert not page.exception, page.exception
    spec = chart(page, "Token-frequency neurons")
    assert spec["data"][0]["x"] == list(top["neuron"][:3])
    kl = spec["data"][2]
    assert kl["name"].startswith("KL after ablation − clean KL")  # the change, readable, not three ~equal bars
    # each bar is its ablated KL (hover data) minus one clean KL (the old check compared the bars with themselves)
    clean = [float(kl_after) - float(change) for change, kl_after in zip(values(kl["y"]), values(kl["customdata"]),
                                                                          strict=True)]
    assert max(clean) - min(clean) < 1e-6


def test_induction_view(page):
    view(page, "Induction")
    page.text_input(key="en-neurons").input("1.5").run()
    page.number_input(key="en-ind-seqs").set_value(2)
    page.number_input(key="en-ind-half").set_value(8)
    page.number_input(key="en-ind-random").set_value(2)
    page.button(key="en-ind-run").click().run()
    assert not page.exception, page.exception
    spec = chart(page, "Induction")
    assert len(values(spec["data"][0]["y"])) == 16 and spec["data"][0]["name"] == "1.5"
    summary = [df.value for df in page.dataframe if "change / std" in df.value.columns][0]
    assert list(summary["random"]) == [False, True, True]


def test_your_text_view(page):
    view(page, "Your text")
    page.text_area(key="en-text-text").input("Mr. Darcy danced with Elizabeth.").run()
    page.button(key="en-text-run").click().run()
    assert not page.exception, page.exception
    spec = chart(page, "Your text")
    table = [df.value for df in page.dataframe if "top prediction" in df.value.columns][0]
    line = values(spec["data"][0]["y"])
    assert len(line) == len(table) > 3
    # the prepended BOS (GPT-2's tokenizer adds none: on by default) is off the line and its scale, and named why
    assert page.toggle(key="en-text-bos").value is True and page.query_params["bos"] == "1"
    assert table["token"].iloc[0] == "<|endoftext|>" and table["token"].iloc[1] == "Mr"
    assert (line[0] is None or np.isnan(line[0])) and table["excluded"].iloc[0].startswith("prepended BOS")
    assert "Left out of the lines and the scale: 0 '<|endoftext|>' (prepended BOS" in spec["layout"][
        "annotations"][0]["text"]
    page.toggle(key="en-text-bos").set_value(False).run()  # off: the text as typed, the first word at position 0
    page.button(key="en-text-run").click().run()
    assert not page.exception, page.exception
    plain = [df.value for df in page.dataframe if "top prediction" in df.value.columns][0]
    assert page.query_params["bos"] == "0" and list(plain["token"]) == list(table["token"].iloc[1:])
    measured = [why for why in plain["excluded"] if why]
    assert all(why.startswith("measured attention sink, ") for why in measured)  # measured, never by rule
    assert not plain["excluded"].iloc[0] or plain["excluded"].iloc[0].startswith("measured")
    page.toggle(key="en-text-bos").set_value(True).run()
    page.text_area(key="en-text-text").input("   ").run()
    assert any("empty" in w.value for w in page.warning)


def test_bad_neuron_text_gets_a_message(page):
    page.text_input(key="en-neurons").input("1.5, 9.9").run()
    assert not page.exception
    assert any("out of range" in e.value for e in page.error)
    page.text_input(key="en-neurons").input("1.5").run()


def test_links_carry_the_model_and_open_on_a_page_visited_before(page, tiny_folder):
    """The URL names the sidebar's (non-default) model; a link inside the app (Information flow's neuron links)
    to this page, visited before in the session, opens the view and neurons it carries."""
    from tests.apptest_util import ROOT

    view(page, "Candidates")
    assert page.query_params["model"] == str(tiny_folder)
    page.switch_page(str(ROOT / "pages/home.py"))
    page.run()
    page.switch_page(str(ROOT / PAGE))
    page.query_params.update({"view": "Neuron detail", "layer": "1", "neurons": "1.7"})
    page.run()
    assert not page.exception, page.exception
    assert page.session_state["en-view"] == "Neuron detail" and page.session_state["en-neurons"] == "1.7"
    page.text_input(key="en-neurons").input("1.5").run()  # the session's own edits are not undone by its URL
    assert page.session_state["en-neurons"] == "1.5" and page.query_params["neurons"] == "1.5"
