"""The Information flow page through streamlit.testing on the bundled model: Run, lens, contributions, graph."""
from __future__ import annotations

import json

import pytest

from tests.apptest_util import open_page

pytestmark = pytest.mark.bundled


def test_flow_page_runs_and_the_threshold_filters_without_recomputing(bundled_lm):
    at = open_page("pages/flow.py")
    assert not at.exception and any("press **Run**" in i.value.replace("Press", "press") for i in at.info)
    at.text_area(key="flow-text").input("The capital of France is").run()
    at.button(key="flow-run").click().run()
    assert not at.exception, at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert any(t.startswith("Logit lens: ' Paris'") for t in titles)
    graph = next(s for s in specs if "heads and MLPs above" in s["layout"]["title"]["text"])
    before = int(graph["layout"]["title"]["text"].split()[0])
    at.slider(key="flow-threshold").set_value(0.2).run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    after = int(next(s for s in specs if "heads and MLPs above" in s["layout"]["title"]["text"])["layout"]["title"]
                ["text"].split()[0])
    assert after < before
    assert at.query_params["threshold"] == "0.2" and at.query_params["run"] == "1"
    captions = " ".join(c.value for c in at.caption)
    assert "add up to" in captions and "first becomes the top prediction" in captions


def test_a_linked_node_the_graph_lacks_is_named(bundled_lm):
    """node=zzz in a link drew the graph and no node, without a word: the note names it and how nodes are named."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import APP, ROOT

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"text": "The capital of France is", "node": "zzz", "run": "1"})
    at.switch_page(str(ROOT / "pages/flow.py"))
    at.run()
    assert not at.exception, at.exception
    (note,) = [w.value for w in at.warning if "zzz" in w.value]
    assert note.startswith("The link opens node 'zzz', which this graph does not have (its nodes are named like h")
