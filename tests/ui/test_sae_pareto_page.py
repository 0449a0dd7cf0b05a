"""The SAE Pareto page: the shipped sweep opens (figure, ratio sentences from its numbers, table), its JSON export is
`sae pareto`'s document and `interpscope.sae.frontiers(...).to_dict()`, and a sweep folder given by path (a tiny real
sweep) opens too; a folder that is not a sweep is a message, not a crash."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import interpscope.sae
from interpscope.cli import main
from interpscope.results import without_timings
from interpscope.sae.sweep import SweepSettings, grid, run_sweep
from pages.sae_pareto import FOLDER, SHIPPED_DIR, shipped_sweeps
from tests.apptest_util import open_page
from tests.sae_store_tiny import HOOK, tiny_lm

PAGE = "pages/sae_pareto.py"


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)


def test_the_shipped_sweep_opens_and_exports_the_pareto_document(exports, capsys):
    sweeps = shipped_sweeps()
    assert sweeps, f"no shipped sweep under {SHIPPED_DIR}"
    name, folder = next(iter(sweeps.items()))
    at = open_page(PAGE)
    assert not at.exception, at.exception
    assert at.selectbox(key="pareto_sweep").value == name
    text = _markdown(at)
    analysis = interpscope.sae.frontiers(folder)
    for sentence in analysis.sentences("loss_recovered"):
        assert sentence in text  # the ratio sentence on the page is the one computed from the numbers
    assert "Every SAE was evaluated on the same" in text
    sweep_table = at.dataframe[-1].value  # the last table; the synthetic run's comes before it
    assert len(at.dataframe) == 2 and len(sweep_table) == len(analysis.rows)
    assert not sweep_table.isna().any().any()  # no column that does not apply to some rows (None cells)
    from interpscope.sae.l0_proxy import proxy_l0, proxy_sentence, sweep_points
    from pages.sae_pareto import synthetic_proxy_text, synthetic_result

    table = interpscope.sae.sweep.load_table(folder)
    points, source = sweep_points(table, folder)
    labels = {r["architecture"]: r["label"] for r in table.rows}
    for arch, pts in points.items():  # issue 42: the correct-L0 proxy beside the frontier, from its c_dec values
        assert proxy_sentence(proxy_l0(pts, arch), labels[arch]) in text
    assert source in text and synthetic_proxy_text() in text  # and its control on synthetic data
    synth = synthetic_result()
    assert synth is not None and all(sentence in text for sentence in synth.sentences())
    assert len(at.dataframe[0].value) == len(synth.rows)
    code = main(["sae", "pareto", "--sweep", folder, "--quiet"])
    cli = json.loads(capsys.readouterr().out)
    assert code == 0
    assert without_timings(exports["sae-pareto"]) == without_timings(cli) == without_timings(analysis.to_dict())
    rows = analysis.rows
    archs = ("relu", "gated", "topk", "jumprelu", "batchtopk", "matryoshka")  # the sweep, every architecture
    assert {r["architecture"] for r in rows} == set(archs)
    assert min(sum(r["architecture"] == a for r in rows) for a in archs) >= 4
    assert all(r["training_tokens"] >= 1_000_000 for r in rows)
    cache = json.loads((Path(folder) / "sweep_table.json").read_text(encoding="utf-8"))
    assert cache["cache_tokens"] >= 250_000  # one activation cache of distinct corpus tokens, shared by every SAE
    sentences = analysis.sentences("loss_recovered")
    for arch in archs:  # every architecture has a frontier; each but the baseline a sentence about its ratio
        assert analysis.frontiers["loss_recovered"][arch]
        assert arch == "relu" or any(sentence.startswith(arch) for sentence in sentences), (arch, sentences)


@pytest.fixture
def tiny_sweep(tmp_path, monkeypatch):
    # the sweep's caches go to a data dir of its own; the page then opens with the session's data dir, where the
    # bundled model the app's sidebar loads is already converted (in the tmp one it was converted again: ~20 s)
    threads = torch.get_num_threads()
    with monkeypatch.context() as patched:
        patched.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
        torch.set_num_threads(1)
        lm = tiny_lm()
        settings = SweepSettings(model_name=lm.name, hook_name=HOOK, width=32, tokens=512, cache_tokens=1024,
                                 context_size=32, batch_size=256, warmup_steps=1)
        run_sweep(lm, grid(["relu", "topk"], 32, {"*": [1.0]}, {"*": [4]}), settings, tmp_path / "s",
                  eval_tokens=128)
        torch.set_num_threads(threads)
    return tmp_path / "s"


def test_a_sweep_folder_by_path_opens_and_a_wrong_folder_is_a_message(tiny_sweep, tmp_path):
    at = open_page(PAGE, pareto_sweep=FOLDER, pareto_path=str(tiny_sweep))
    assert not at.exception, at.exception
    assert "2 SAEs of width 32" in _markdown(at)
    assert any("L0 of relu" in m.value or "no ratio to relu" in m.value for m in at.markdown)
    at = open_page(PAGE, pareto_sweep=FOLDER, pareto_path=str(tmp_path))
    assert not at.exception and any("No sweep table" in e.value for e in at.error)


def test_a_baseline_the_sweep_lacks_is_named():
    """baseline=nope in a link gave ratios relative to relu without a word."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest_util import APP, ROOT

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"baseline": "nope"})
    at.switch_page(str(ROOT / PAGE))
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="pareto_baseline").value == "relu"
    assert any(w.value.startswith("This sweep has no 'nope' SAEs to be the baseline (it has ") and
               w.value.endswith("the ratios are relative to relu.") for w in at.warning), [w.value for w in at.warning]
