"""SAE sweeps and their Pareto analysis: a sweep killed after one SAE resumes without retraining it and gives the
table of an uninterrupted run, keeps files it did not write, refuses bad input; frontiers and matched-L0 ratios on a
synthetic table; the pareto document is one document from the command line, the page's export and to_dict()."""
from __future__ import annotations

import json

import pytest
import torch

from components.export import data_json
from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.results import without_timings
from interpscope.sae.pareto import frontier, matched_ratio, pareto_analysis
from interpscope.sae.sweep import SweepSettings, grid, load_table, run_sweep
from interpscope.sae.sweep_docs import SweepTable
from tests.sae_store_tiny import HOOK, tiny_lm


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(scope="module")
def lm():
    torch.set_num_threads(1)
    return tiny_lm()


class _Killed(Exception):
    pass


def _settings(lm) -> SweepSettings:
    return SweepSettings(model_name=lm.name, hook_name=HOOK, width=48, tokens=1024, cache_tokens=2048,
                         context_size=32, batch_size=256, warmup_steps=2)


def test_a_killed_sweep_resumes_without_retraining_and_gives_the_same_table(lm, tmp_path):
    specs = grid(["relu", "topk"], 48, {"*": [1.0, 4.0]}, {"*": [4]})
    assert [s.run_name() for s in specs] == ["relu-48-l1", "topk-48-k4", "relu-48-l4"]  # interleaved

    def kill_after_one(stage: str, done: int, total: int) -> None:
        if stage == "train" and done == 1:
            raise _Killed

    with pytest.raises(_Killed):
        run_sweep(lm, specs, _settings(lm), tmp_path / "s", eval_tokens=256, progress=kill_after_one)
    first = tmp_path / "s" / "relu-48-l1"
    assert (first / "train.json").is_file() and not (tmp_path / "s" / "topk-48-k4" / "train.json").exists()
    stamp = (first / "sae_weights.safetensors").stat().st_mtime_ns
    (tmp_path / "s" / "notes.txt").write_text("mine")  # a file the sweep did not write
    trained = []
    resumed = run_sweep(lm, specs, _settings(lm), tmp_path / "s", eval_tokens=256,
                        progress=lambda stage, done, total: trained.append((stage, done)))
    assert ("train", 1) in trained and ("train", 3) in trained and ("train", 0) not in trained
    assert (first / "sae_weights.safetensors").stat().st_mtime_ns == stamp  # not retrained
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"
    fresh = run_sweep(lm, specs, _settings(lm), tmp_path / "f", eval_tokens=256)
    assert resumed.to_dict() == fresh.to_dict()
    assert len(resumed.rows) == 3 and {r["architecture"] for r in resumed.rows} == {"relu", "topk"}
    assert load_table(tmp_path / "s").to_dict() == resumed.to_dict()
    csv = (tmp_path / "s" / "sweep_table.csv").read_text().splitlines()
    assert len(csv) == 4 and "loss_recovered" in csv[0] and "shrinkage" in csv[0]
    for row in resumed.rows:  # one eval: every SAE on the same held-out tokens
        assert row["n_tokens"] == resumed.rows[0]["n_tokens"] and row["ce_clean"] == resumed.rows[0]["ce_clean"]
        assert row["training_tokens"] == 1024 and row["l0"] > 0
    other = _settings(lm)
    other.lr = 1e-3
    with pytest.raises(InterpscopeError, match="lr"):
        run_sweep(lm, specs, other, tmp_path / "s", eval_tokens=256)


def _row(arch: str, l0: float, lr: float, fvu: float) -> dict:
    return {"name": f"{arch}-{l0:g}", "folder": f"{arch}-{l0:g}", "architecture": arch, "label": arch, "width": 64,
            "knob": "l1", "sparsity": 1.0, "training_tokens": 1000, "l0": l0, "loss_recovered": lr, "fvu": fvu}


def _synthetic() -> SweepTable:
    rows = [_row("relu", 10, 0.90, 0.30), _row("relu", 20, 0.95, 0.20), _row("relu", 40, 0.98, 0.10),
            _row("relu", 30, 0.93, 0.25),  # dominated by relu-20 on both
            _row("gated", 5, 0.90, 0.30), _row("gated", 10, 0.95, 0.20), _row("gated", 20, 0.98, 0.10),
            _row("topk", 100, 0.99, 0.05), _row("topk", 200, 0.995, 0.02)]  # no overlap in loss recovered
    return SweepTable(model_name="m", hook_name="h", width=64, tokens_per_sae=1000, cache_tokens=1000,
                      eval={"n_tokens": 100, "split": "test"}, rows=rows)


def test_frontiers_and_the_matched_l0_ratio_on_a_synthetic_table():
    table = _synthetic()
    relu = [r for r in table.rows if r["architecture"] == "relu"]
    assert [r["name"] for r in frontier(relu, "loss_recovered")] == ["relu-10", "relu-20", "relu-40"]
    assert [r["name"] for r in frontier(relu, "fvu")] == ["relu-10", "relu-20", "relu-40"]
    analysis = pareto_analysis(table)
    gated = analysis.ratio("gated")
    assert (gated.overlap_low, gated.overlap_high) == (0.90, 0.98)
    assert gated.ratio_median == pytest.approx(0.5) and gated.ratio_min == pytest.approx(0.5)
    topk = analysis.ratio("topk")
    assert topk.ratio_median is None and "no common range" in topk.reason
    sentence = analysis.sentences()[0]
    assert "gated needs 0.50x the L0 of relu" in sentence and "0.900 to 0.980" in sentence
    assert "no ratio" in analysis.sentences()[1]
    assert "fewer active features" in sentence
    # a frontier crossing relu's (ratios 0.8 .. 1.25 along it) is "about as many", not "fewer" by its median
    crossing = SweepTable(model_name="m", hook_name="h", width=64, tokens_per_sae=1000, cache_tokens=1000,
                          eval={"n_tokens": 100, "split": "test"},
                          rows=relu + [_row("cross", 8, 0.90, 0.3), _row("cross", 50, 0.98, 0.1)])
    said = pareto_analysis(crossing).sentences()[0]
    assert said.startswith("cross needs") and "about as many active features as the baseline" in said, said
    # an architecture with twice relu's L0 at the low end and equal L0 at the high end: the ratio moves
    other = [_row("x", 20, 0.90, 0.3), _row("x", 40, 0.98, 0.1)]
    moving = matched_ratio(other, frontier(relu, "loss_recovered"), "loss_recovered", "x", "relu")
    assert moving.ratio_max == pytest.approx(2.0) and moving.value_at_max == pytest.approx(0.90)
    assert moving.ratio_min == pytest.approx(1.0) and moving.value_at_min == pytest.approx(0.98)


def test_a_second_seed_gives_the_ratio_an_interval_over_seed_pairings():
    """45.14: the shipped ratios came from one seed each; with a second seed of each architecture the ratio of every
    pairing of seeds is computed, and its range is the interval; one seed says it has none."""
    table = _synthetic()
    single = pareto_analysis(table)
    assert single.ratio("gated").seed_low is None and "no interval" in single.sentences()[0]
    second = [dict(_row("relu", l0, lr, fvu), name=f"relu-{l0:g}-s1", seed=1)
              for l0, lr, fvu in ((12, 0.90, 0.30), (24, 0.95, 0.20), (48, 0.98, 0.10))]
    second += [dict(_row("gated", l0, lr, fvu), name=f"gated-{l0:g}-s1", seed=1)
               for l0, lr, fvu in ((4, 0.90, 0.30), (8, 0.95, 0.20), (16, 0.98, 0.10))]
    both = pareto_analysis(SweepTable(model_name="m", hook_name="h", width=64, tokens_per_sae=1000, cache_tokens=1000,
                                      eval={"n_tokens": 100, "split": "test"}, rows=table.rows + second))
    gated = both.ratio("gated")
    assert gated.ratio_median == pytest.approx(0.5)  # the first seeds' pairing, as before
    medians = sorted(p["ratio_median"] for p in gated.seed_ratios)
    assert medians == pytest.approx(sorted([0.5, 5 / 12, 0.4, 1 / 3]))  # gated/relu at seeds (0,0) (0,1) (1,0) (1,1)
    assert (gated.seed_low, gated.seed_high) == (pytest.approx(1 / 3), pytest.approx(0.5))
    assert gated.n_seeds == gated.n_baseline_seeds == 2
    assert "over 2 seed(s) of gated and 2 of relu (4 pairings) the median ratio spans 0.33 to 0.50" in \
        both.sentences()[0]
    assert both.frontiers["loss_recovered"]["relu"] == ["relu-10", "relu-20", "relu-40"]  # the first seed's frontier
    topk = both.ratio("topk")
    assert topk.n_seeds == 1 and topk.n_baseline_seeds == 2


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_pareto_document_is_one_from_cli_page_and_api(tmp_path, capsys):
    table = _synthetic()
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep_table.json").write_text(json.dumps(table.to_dict()))
    code, out, err = _cli(capsys, ["sae", "pareto", "--sweep", str(folder), "--json", str(tmp_path / "p.json")])
    assert code == 0, err
    cli = json.loads((tmp_path / "p.json").read_text())
    api = pareto_analysis(load_table(folder)).to_dict()
    page = json.loads(data_json(pareto_analysis(load_table(folder))))
    assert cli["schema"] == "interpscope.sae_pareto" and cli["schema_version"] == 2
    assert without_timings(cli) == without_timings(api) == without_timings(page)
    assert cli["frontiers"]["loss_recovered"]["relu"] == ["relu-10", "relu-20", "relu-40"]
    code, out, err = _cli(capsys, ["sae", "pareto", "--sweep", str(folder)])
    assert code == 0 and json.loads(out) == api and "gated needs 0.50x" in err
    code, out, err = _cli(capsys, ["sae", "pareto", "--sweep", str(tmp_path / "nothing")])
    assert code == 2 and "No sweep table" in err
    code, out, err = _cli(capsys, ["sae", "pareto", "--sweep", str(folder), "--baseline", "jumprelu"])
    assert code == 2 and "not in this sweep" in err


def test_sweep_command_refuses_bad_input_before_any_work(tmp_path, capsys):
    base = ["sae", "sweep", "--hook", HOOK, "--out", str(tmp_path / "o"), "--tokens", "4096"]
    for extra, message in ((["--archs", "relu,nonsense", "--sparsity", "1"], "Unknown SAE architecture"),
                           (["--archs", "relu"], "No sparsity settings for relu"),
                           (["--archs", "relu", "--sparsity", "1", "--target-hook", "blocks.0.hook_mlp_out"],
                            "transcoders"),
                           (["--archs", "transcoder", "--sparsity", "1"], "needs --target-hook"),
                           (["--archs", "relu", "--set", "relu=x"], "--set"),
                           (["--archs", "relu", "--sparsity", "1,1"], "repeats")):
        code, out, err = _cli(capsys, base + extra)
        assert code == 2 and message in err, (extra, err)
    assert not (tmp_path / "o").exists()


def test_a_sweep_table_that_is_not_an_object_is_refused_by_name(tmp_path):
    (tmp_path / "s").mkdir()
    for text, said in (("[1, 2]", "holds a JSON list"), ("{not json", "not JSON"), ('"x"', "holds a JSON str")):
        (tmp_path / "s" / "sweep_table.json").write_text(text)
        with pytest.raises(InterpscopeError, match=said):
            load_table(tmp_path / "s")


def test_server_mode_refuses_a_sweep_table_linked_from_outside(monkeypatch, tmp_path):
    """A sweep folder inside the data directory whose sweep_table.json is a symlink to a file outside it is refused
    in server mode before it is read (the Pareto page read it), and its refusal names no absolute path."""
    from interpscope.config import ASSETS_DIR

    shipped = ASSETS_DIR / "sae_sweeps" / "smollm2-135m-blocks.15-resid-post" / "sweep_table.json"
    data, outside = tmp_path / "data", tmp_path / "outside"
    (data / "sweeps" / "mine").mkdir(parents=True)
    outside.mkdir()
    (outside / "sweep_table.json").write_bytes(shipped.read_bytes())
    (data / "sweeps" / "mine" / "sweep_table.json").symlink_to(outside / "sweep_table.json")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)
    assert load_table(data / "sweeps" / "mine").rows  # a local user may link anywhere
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    refusals = set()
    for folder in (data / "sweeps" / "mine", outside, tmp_path / "nowhere"):
        with pytest.raises(InterpscopeError) as refused:
            load_table(folder)
        refusals.add(str(refused.value).replace("sweep table", "sweep folder"))
    assert len(refusals) == 1 and str(tmp_path) not in refusals.pop()
    assert load_table(shipped.parent).rows  # the shipped sweep, inside the assets root, still loads
