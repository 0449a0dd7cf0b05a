"""Click-to-inspect in a real browser (issue 45, items 7, 8, 13): every figure that invites a click is clicked with
the mouse at the pixel where plotly drew the element (computed from the rendered plot: the trace's data through its
axes' l2p, plus the plot's position on the page), and the page must then show what was clicked. One app server for
the module; a tiny random Llama folder (by link: ?model=<folder>) keeps every page to a few seconds."""
from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import torch
from playwright.sync_api import expect

from interpscope.models.tokenizers import gpt2_tokenizer
from tests.ui.conftest import start_app, stop_app, wait_for_app

pytestmark = pytest.mark.browser
SHOTS = Path("/tmp/shots/clicks")

# the rendered position of the point whose customdata is `want` (JSON-equal), in page coordinates
POINT_JS = """(el, want) => {
  const gd = el.querySelector('.js-plotly-plot');
  const fl = gd._fullLayout, box = gd.getBoundingClientRect(), key = JSON.stringify(want);
  for (const trace of gd._fullData) {
    const cd = trace.customdata;
    if (!cd || trace.visible !== true) continue;
    const xa = fl[trace.xaxis.replace('x', 'xaxis')], ya = fl[trace.yaxis.replace('y', 'yaxis')];
    const at = (x, y) => ({x: box.left + xa._offset + xa.l2p(xa.d2l(x)), y: box.top + ya._offset + ya.l2p(ya.d2l(y))});
    for (let i = 0; i < cd.length; i++) {
      if (trace.type === 'heatmap') {  // customdata[row][column]: the cell's centre
        for (let j = 0; j < cd[i].length; j++) if (JSON.stringify(cd[i][j]) === key) return at(trace.x[j], trace.y[i]);
      } else if (JSON.stringify(cd[i]) === key) {
        return at(trace.x[i], trace.y[i]);
      }
    }
  }
  return null;
}"""
# how many drawn points are fainter than `below` (plotly fades the points a click did not select)
FADED_JS = """(el, below) => Array.from(el.querySelectorAll('.scatterlayer .point'))
  .filter(p => parseFloat(getComputedStyle(p).opacity) < below).length"""
# every customdata of the traces named `name` (all traces when null)
CUSTOMDATA_JS = """(el, name) => {
  const gd = el.querySelector('.js-plotly-plot');
  return gd._fullData.filter(t => t.customdata && (name === null || t.name === name))
                     .flatMap(t => Array.from(t.customdata));
}"""


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, initializer_range=0.3)
    folder = tmp_path_factory.mktemp("clicks-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def server(artefacts):
    process, url = start_app(artefacts / "streamlit-clicks.log")
    yield url
    stop_app(process)


def link(server: str, path: str, **params) -> str:
    return f"{server}/{path}?{urllib.parse.urlencode(params)}"


def chart(page, title: str):
    """The plotly chart whose text (title, subplot titles) holds `title`, scrolled into view and drawn."""
    locator = page.locator("[data-testid='stPlotlyChart']").filter(has_text=title).first
    locator.wait_for(timeout=180_000)
    locator.scroll_into_view_if_needed()
    page.wait_for_timeout(300)  # plotly's layout after the scroll
    return locator


def click_point(page, figure, want) -> None:
    """A real mouse click at the pixel where the point with customdata `want` is drawn."""
    spot = figure.evaluate(POINT_JS, want)
    assert spot is not None, f"no point {want!r} in the figure"
    page.mouse.move(spot["x"], spot["y"])
    page.wait_for_timeout(250)  # plotly's hover (a click selects what is hovered)
    page.mouse.click(spot["x"], spot["y"])


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def query(page) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(page.url).query))


@pytest.fixture
def tall_page(browser):
    """A fresh 1400 x 2400 page: Streamlit scrolls inside its own container, so a tall viewport is what lets one
    screenshot hold a whole page."""
    context = browser.new_context(viewport={"width": 1400, "height": 2400})
    page = context.new_page()
    page.set_default_timeout(120_000)
    yield page
    context.close()


def test_graph_node_and_edge_clicks_select_and_the_link_keeps_the_selection(server, tall_page, llama_folder):
    page = tall_page
    page.goto(link(server, "attribution-graphs", model=llama_folder, device="cpu", transcoders="random", width=24,
                   nodes=20, edges=60, run=1))
    figure = chart(page, "Attribution graph of")
    wait_for_app(page)
    features = figure.evaluate(CUSTOMDATA_JS, "feature")
    assert features, "the graph has no feature node"
    node = features[0]
    click_point(page, figure, node)
    panel = page.locator("[data-testid='stMarkdownContainer']").filter(has_text=f"{node} · feature at position")
    panel.first.wait_for(timeout=60_000)
    wait_for_app(page)
    assert query(page).get("select") == node  # item 13: the selection is in the link
    shot(page, "graph-node-clicked")
    # the link brings the selection back
    page.goto(page.url)
    panel.first.wait_for(timeout=120_000)
    # an edge: a click on its midpoint names it and opens its heads split where the page offers one
    figure = chart(page, "Attribution graph of")
    edges = [e for e in figure.evaluate(CUSTOMDATA_JS, "edges")]
    assert edges, "no clickable edge"
    source, target = edges[0]
    click_point(page, figure, [source, target])
    page.get_by_text(f"Edge {source} → {target}").first.wait_for(timeout=60_000)
    wait_for_app(page)
    assert set(query(page).get("select", "").split(",")) == {source, target}
    shot(page, "graph-edge-clicked")


def test_heads_grid_and_finder_cells_open_the_clicked_head(server, tall_page, llama_folder):
    page = tall_page
    page.goto(link(server, "attention-heads", model=llama_folder, device="cpu",
                   text="one two three four one two three four", run=1))
    figure = chart(page, "click a head to open its pattern")
    wait_for_app(page)
    shown = query(page).get("head")  # the page's first pick (the strongest previous-token head)
    target = "0.1" if shown != "0.1" else "1.3"
    click_point(page, figure, target)
    page.get_by_text(f"Head {target} puts").first.wait_for(timeout=60_000)
    wait_for_app(page)
    assert query(page).get("head") == target
    shot(page, "heads-grid-clicked")
    page.goto(link(server, "attention-heads", model=llama_folder, device="cpu", view="Head finder", sequences=2,
                   half=6, ablate=0, run=1))
    figure = chart(page, "score")
    wait_for_app(page)
    click_point(page, figure, "0.3")
    page.get_by_text("Head 0.3 puts").first.wait_for(timeout=60_000)  # its pattern, on the Patterns view
    wait_for_app(page)
    shot(page, "heads-finder-clicked")


def test_patching_cell_click_shows_the_cell_and_sets_the_sender(server, tall_page, llama_folder):
    page = tall_page
    page.goto(link(server, "activation-patching", model=llama_folder, device="cpu", components="heads,mlp",
                   methods="real,atp", run=1))
    figure = chart(page, "Attention heads")
    wait_for_app(page)
    click_point(page, figure, ["heads", "real", 1, 2])
    page.get_by_text("Clicked: head L1.H2").first.wait_for(timeout=60_000)
    wait_for_app(page)
    expect(page.get_by_role("textbox", name="Sender")).to_have_value("L1.H2")
    figure = chart(page, "MLP output")
    click_point(page, figure, ["mlp", "atp", 0, 3])
    page.get_by_text("Clicked: layer 0, position 3").first.wait_for(timeout=60_000)
    wait_for_app(page)
    expect(page.get_by_role("textbox", name="Sender")).to_have_value("L0.mlp")
    assert page.get_by_text("Clicked: head L1.H2").count() == 0  # one readout: the last click's
    shot(page, "patching-cell-clicked")


def test_flow_node_click_opens_the_head_and_fades_nothing(server, tall_page, llama_folder):
    page = tall_page
    page.goto(link(server, "information-flow", model=llama_folder, device="cpu", run=1))
    figure = chart(page, "heads and MLPs above")
    wait_for_app(page)
    head = next(n for n in figure.evaluate(CUSTOMDATA_JS, None) if n.startswith("h"))
    layer, index = head[1:].split(".")
    click_point(page, figure, head)
    page.get_by_role("heading").filter(has_text=f"L{layer}.H{index}: relevance").first.wait_for(timeout=60_000)
    wait_for_app(page)
    assert query(page).get("node") == head
    figure = chart(page, "heads and MLPs above")
    faded = figure.evaluate(FADED_JS, 0.5)
    assert faded == 0  # the other nodes stay as drawn (plotly fades unselected points to 0.2)
    shot(page, "flow-node-clicked")


def test_pareto_point_click_opens_the_sae(server, tall_page):
    page = tall_page
    page.goto(f"{server}/sae-pareto")
    figure = chart(page, "L0 vs loss recovered")
    wait_for_app(page)
    folders = figure.evaluate(CUSTOMDATA_JS, None)
    assert folders
    click_point(page, figure, folders[0])
    page.get_by_text("Selected:").first.wait_for(timeout=60_000)
    wait_for_app(page)
    assert page.get_by_text(folders[0]).count() >= 1
    faded = chart(page, "L0 vs loss recovered").evaluate(FADED_JS, 0.3)
    assert faded == 0  # the other SAEs keep their look (plotly fades unselected points to 0.2 of theirs)
    shot(page, "pareto-point-clicked")


def test_entropy_neuron_point_click_inspects_the_neuron(server, tall_page, llama_folder):
    page = tall_page
    page.goto(link(server, "neurons", model=llama_folder, device="cpu"))
    figure = chart(page, "norm vs LogitVar")
    wait_for_app(page)
    click_point(page, figure, "1.5")
    page.get_by_text("Clicked: neuron 1.5").first.wait_for(timeout=60_000)
    wait_for_app(page)
    shot(page, "neuron-point-clicked")
    page.get_by_role("button", name="Open 1.5 in Neuron detail").click()
    page.locator("[data-testid='stMarkdownContainer']").filter(has_text="1.5: rho =").first.wait_for(timeout=120_000)
    assert query(page).get("view") == "Neuron detail" and "1.5" in query(page).get("neurons", "")


def test_token_chip_click_lists_that_tokens_features(server, tall_page):
    """The SAE browser's Prompt view (the shipped SAE on the bundled model): a click on a token chip lists the
    features active at that token (the last token's are listed first)."""
    page = tall_page
    page.goto(link(server, "feature-browser", view="Prompt", text="The cat sat on the mat", run=1))
    page.get_by_text("Click a token").wait_for(timeout=240_000)
    wait_for_app(page)
    page.get_by_text("features active at 6: ' mat'").first.wait_for()
    chip = page.locator("button[data-variant='pills']").filter(has_text="cat").first
    box = chip.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_text("features active at 2: ' cat'").first.wait_for(timeout=60_000)
    wait_for_app(page)
    expect(chip).to_have_attribute("aria-checked", "true")
    shot(page, "sae-token-chip-clicked")
