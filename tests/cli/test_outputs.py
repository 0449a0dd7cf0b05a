"""Nothing lost: commands refuse folders they did not create (unless --force), never delete what is not theirs,
resume only under the same settings, and a feature store is tied to its SAE by the hash of its weights."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.outputs import MARKER, OutputFolder, check_output_file, check_output_folder
from interpscope.sae import load_sae, save_sae
from interpscope.sae.store import FeatureStore
from interpscope.sae.store.layout import FEATURE_STORES, WEIGHTS_HASH, default_store_dir, weights_sha256
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_SAE = ROOT / "assets" / "saes" / "smollm2-135m-blocks.15-relu-4608"
HOOK = "blocks.1.hook_resid_post"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def sae_dir(tmp_path_factory) -> Path:
    return random_sae_folder(tiny_lm(), tmp_path_factory.mktemp("sae") / "sae")


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def foreign_folder(path: Path) -> dict[str, bytes]:
    """A folder a person made: a file and a sub-folder with a file; returns its contents."""
    (path / "results" / "old").mkdir(parents=True)
    (path / "notes.txt").write_text("my notes", encoding="utf-8")
    (path / "results" / "old" / "run.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    return contents(path)


def contents(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interpscope: error: ") and "Traceback" not in err, err
    return lines[0]


# --- the output-folder rules ---------------------------------------------------------------------------------
def test_a_foreign_folder_is_refused_and_left_alone(tmp_path):
    before = foreign_folder(tmp_path / "out")
    with pytest.raises(InterpscopeError, match=r"2 file\(s\) or folder\(s\) Interpscope did not write"):
        OutputFolder.claim(tmp_path / "out")
    assert contents(tmp_path / "out") == before and not (tmp_path / "out" / MARKER).exists()


def test_forced_writes_delete_only_what_was_recorded(tmp_path):
    before = foreign_folder(tmp_path / "out")
    folder = OutputFolder.claim(tmp_path / "out", force=True)
    folder.mkdir("results/new")
    (folder.path / "results" / "new" / "a.npy").write_bytes(b"ours")
    (folder.path / "model.bin").write_bytes(b"ours")
    folder.record("results/new/a.npy", "model.bin")
    (folder.path / "results" / "new" / "theirs.txt").write_text("added later by a person")
    folder.remove_all()
    left = contents(tmp_path / "out")
    assert {k: v for k, v in left.items() if k != MARKER} == dict(before, **{
        "results/new/theirs.txt": b"added later by a person"})
    assert (tmp_path / "out" / "results" / "old").is_dir()


def test_a_folder_it_created_goes_away_whole(tmp_path):
    folder = OutputFolder.claim(tmp_path / "new" / "deep")
    with folder.writing():
        (folder.path / "config.json").write_text("{}")
        (folder.path / "sub").mkdir()
        (folder.path / "sub" / "w.bin").write_bytes(b"x")
    assert sorted(folder.files) == ["config.json", "sub/", "sub/w.bin"]
    assert OutputFolder.claim(tmp_path / "new" / "deep").files == folder.files  # a rerun may write again
    folder.remove_all()
    assert not (tmp_path / "new" / "deep").exists() and (tmp_path / "new").is_dir()


def test_output_paths_are_checked_without_side_effects(tmp_path):
    with pytest.raises(InterpscopeError, match="does not exist"):
        check_output_file(tmp_path / "missing" / "r.json", "--json")
    with pytest.raises(InterpscopeError, match="is a folder"):
        check_output_file(tmp_path, "--png")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InterpscopeError, match="is a file"):
        check_output_folder(tmp_path / "f")
    assert check_output_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b" and not (tmp_path / "a").exists()


# --- sae store --out -----------------------------------------------------------------------------------------
STORE = ["--tokens", "512", "--context", "64", "--eval-tokens", "0"]


def test_store_into_a_foreign_folder(model_dir, sae_dir, tmp_path, capsys):
    out = tmp_path / "out"
    before = foreign_folder(out)
    code, _, err = run(capsys, "sae", "store", "--sae", sae_dir, "--model", model_dir, "--out", out, *STORE)
    assert code == 2 and "--force" in one_error_line(err)
    assert contents(out) == before and not (tmp_path / "out.partial").exists()

    code, stdout, _ = run(capsys, "sae", "store", "--sae", sae_dir, "--model", model_dir, "--out", out, "--force",
                          *STORE)
    assert code == 0 and json.loads(stdout)["store"] == str(out)
    after = contents(out)
    assert {k: after[k] for k in before} == before  # every foreign file kept, byte for byte
    assert FeatureStore(out).card(3).id == 3 and not (tmp_path / "out.partial").exists()

    (out / MARKER).unlink()  # a store as older versions left it: no marker, its files known by the store format
    code, _, err = run(capsys, "sae", "store", "--sae", sae_dir, "--model", model_dir, "--out", out, "--tokens",
                       "1024", "--context", "64", "--eval-tokens", "0")
    assert code == 2 and "other settings" in one_error_line(err)
    code, _, _ = run(capsys, "sae", "store", "--sae", sae_dir, "--model", model_dir, "--out", out, "--force",
                     "--tokens", "1024", "--context", "64", "--eval-tokens", "0")
    assert code == 0 and FeatureStore(out).spec["n_tokens"] == 1024
    replaced = contents(out)
    assert {k: replaced[k] for k in before} == before
    assert set(replaced) - set(before) == set(after) - set(before)  # the store's own files, nothing else


def test_unfinished_store_build_resumes_only_under_its_settings(model_dir, sae_dir, tmp_path):
    from interpscope.models.loading import load_model
    from interpscope.sae.store import build_store

    lm = load_model(str(model_dir), device="cpu")
    options = dict(n_tokens=1024, context_size=64, batch_size=4)
    with pytest.raises(InterpscopeError, match="stopped"):
        build_store(lm, sae_dir, tmp_path / "s", stop=lambda: True, **options)
    chunks = sorted((tmp_path / "s.partial").glob("chunk_*.npz"))
    assert len(chunks) == 1
    with pytest.raises(InterpscopeError, match="batch_size: 4 in the unfinished build, 2 now"):
        build_store(lm, sae_dir, tmp_path / "s", **dict(options, batch_size=2))
    assert sorted((tmp_path / "s.partial").glob("chunk_*.npz")) == chunks
    out = build_store(lm, sae_dir, tmp_path / "s", force=True, **dict(options, batch_size=2))
    assert FeatureStore(out).spec["batch_size"] == 2 and not (tmp_path / "s.partial").exists()


# --- sae train --out: folders and resuming -------------------------------------------------------------------
def train_args(model_dir: Path, out: Path, *extra: str) -> list:
    return ["sae", "train", "--model", model_dir, "--hook", HOOK, "--width", "48", "--tokens", "3072",
            "--cache-tokens", "2500", "--context", "32", "--batch-size", "256", "--checkpoint-every", "4",
            "--out", out, *extra]


def test_resume_with_other_settings_is_refused_then_forced_fresh(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(capsys, *train_args(model_dir, out))[0] == 0
    weights = out / "relu-48-l5" / "sae_weights.safetensors"
    first = weights.read_bytes()
    (out / "checkpoints" / "README.txt").write_text("a person's note inside the checkpoint folder")

    code, _, err = run(capsys, *train_args(model_dir, out, "--lr", "0.001"))
    line = one_error_line(err)
    assert code == 2 and "lr: 0.0003 in the checkpoint, 0.001 now" in line and "--force" in line
    code, _, err = run(capsys, *train_args(model_dir, out, "--lr", "0.001", "--width", "64", "--seed", "1"))
    line = one_error_line(err)
    assert code == 2 and "seed: 0 in the checkpoint, 1 now" in line and '"width": 64' in line
    assert weights.read_bytes() == first

    code, stdout, _ = run(capsys, *train_args(model_dir, out, "--lr", "0.001", "--force"))
    assert code == 0
    cfg = json.loads((out / "relu-48-l5" / "cfg.json").read_text())
    assert cfg["metadata"]["interpscope"]["lr"] == 0.001
    assert weights.read_bytes() != first
    assert run(capsys, *train_args(model_dir, tmp_path / "fresh", "--lr", "0.001"))[0] == 0
    assert weights.read_bytes() == (tmp_path / "fresh" / "relu-48-l5" / "sae_weights.safetensors").read_bytes()
    assert (out / "checkpoints" / "README.txt").read_text().startswith("a person's note")
    assert run(capsys, *train_args(model_dir, out, "--lr", "0.001"))[0] == 0  # same settings: resumes, no --force


def test_train_into_a_foreign_folder_keeps_its_files(model_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    before = foreign_folder(out)
    code, _, err = run(capsys, *train_args(model_dir, out))
    assert code == 2 and "notes.txt" in one_error_line(err) and contents(out) == before
    assert run(capsys, *train_args(model_dir, out, "--force"))[0] == 0
    after = contents(out)
    assert {k: after[k] for k in before} == before and "relu-48-l5/sae_weights.safetensors" in after


@pytest.mark.parametrize("script", ["train_adder.py", "train_mamba.py"])
def test_training_scripts_refuse_a_foreign_out_folder(script, tmp_path):
    before = foreign_folder(tmp_path / "out")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--out", str(tmp_path / "out")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "did not write" in result.stderr and "Traceback" not in result.stderr
    assert contents(tmp_path / "out") == before


# --- a store belongs to the SAE weights it was built for ------------------------------------------------------
def test_shipped_manifests_record_their_sae_weights_hash():
    for store in sorted(FEATURE_STORES.shipped.iterdir()):
        manifest = json.loads((store / "manifest.json").read_text())
        assert manifest[WEIGHTS_HASH] == weights_sha256(ROOT / manifest["spec"]["sae_path"]), store.name


def test_a_changed_copy_named_like_a_shipped_sae_is_refused(tmp_path, capsys):
    copy = tmp_path / "elsewhere" / SHIPPED_SAE.name
    shutil.copytree(SHIPPED_SAE, copy)
    code, stdout, _ = run(capsys, "sae", "feature", "--sae", copy, "--id", "7", "--json")
    assert code == 0 and json.loads(stdout)["store"]["name"] == SHIPPED_SAE.name  # same weights, same store
    sae = load_sae(copy, dtype=None)
    with torch.no_grad():
        sae.b_enc.add_(0.25)
    save_sae(sae, copy)
    shipped_hash = json.loads((FEATURE_STORES.shipped / SHIPPED_SAE.name / "manifest.json").read_text())[WEIGHTS_HASH]
    code, _, err = run(capsys, "sae", "feature", "--sae", copy, "--id", "7", "--json")
    line = one_error_line(err)
    assert code == 2
    assert f"was built for SAE weights {shipped_hash[:8]}, the SAE at {copy} has {weights_sha256(copy)[:8]}" in line
    assert default_store_dir(copy) != FEATURE_STORES.shipped / SHIPPED_SAE.name  # a rebuild never lands on it

    code, stdout, _ = run(capsys, "sae", "feature", "--sae", SHIPPED_SAE, "--id", "7", "--json")
    assert code == 0 and json.loads(stdout)["id"] == 7


def test_an_sae_changed_after_its_store_was_built_is_not_shown_the_old_cards(model_dir, tmp_path, capsys):
    sae_dir = random_sae_folder(tiny_lm(), tmp_path / "sae")
    assert run(capsys, "sae", "store", "--sae", sae_dir, "--model", model_dir, *STORE)[0] == 0
    assert FeatureStore.for_sae(sae_dir).card(2).id == 2
    sae = load_sae(sae_dir)
    with torch.no_grad():
        sae.W_dec.mul_(-1.0)
    save_sae(sae, sae_dir)
    with pytest.raises(InterpscopeError, match=f"the SAE at {sae_dir} has {weights_sha256(sae_dir)[:8]}"):
        FeatureStore.for_sae(sae_dir)


# --- an output that is one of the command's own inputs (issue 45.17: 7 commands overwrote their input) ---------------
def _reproductions(root: Path) -> list[tuple[list[str], Path]]:
    """(argv, the input file the output named) for each case the CLI battery found, in files made under root."""
    from interpscope.config import ASSETS_DIR
    from interpscope.sae.transcoder_set import random_transcoder_set, save_transcoder_set

    sae = root / "sae"
    shutil.copytree(next(p for p in (ASSETS_DIR / "saes").iterdir() if (p / "cfg.json").is_file()), sae)
    tset = root / "set"
    save_transcoder_set(random_transcoder_set(tiny_lm(), 8, seed=0), tset)
    sweep = root / "sweep"
    shutil.copytree(ASSETS_DIR / "sae_sweeps" / "smollm2-135m-blocks.15-resid-post", sweep, dirs_exist_ok=True)
    (root / "x.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a picture")
    (root / "f.csv").write_text("text\nhello world\n")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("some words to train on\n")
    (root / "graph.json").write_text("{}")
    link = root / "link.json"
    link.symlink_to(sae / "cfg.json")
    return [
        (["graph", "--transcoders", str(tset), "--text", "hi", "--json", str(tset / "manifest.json")],
         tset / "manifest.json"),
        (["graph", "--transcoders", str(tset), "--text", "hi", "--json", str(root / "graph.json"), "--check-json",
          str(root / "graph.json"), "--ablation-check", "2"], root / "graph.json"),
        (["sae", "pareto", "--sweep", str(sweep), "--json", str(sweep / "sweep_table.json")],
         sweep / "sweep_table.json"),
        (["explain", "--image", str(root / "x.png"), "--json", str(root / "x.png")], root / "x.png"),
        (["explain", "--file", str(root / "f.csv"), "--json", str(root / "f.csv")], root / "f.csv"),
        (["sae", "bench", "--sae", str(sae), "--json", str(sae / "cfg.json")], sae / "cfg.json"),
        (["sae", "bench", "--sae", str(sae), "--json", str(link)], sae / "cfg.json"),  # through a symlink
        (["sae", "sweep", "--corpus", str(corpus), "--hook", "blocks.1.hook_resid_post", "--out", str(root / "sw"),
          "--json", str(corpus / "a.txt")], corpus / "a.txt"),
        (["sae", "store", "--sae", str(sae), "--out", str(sae)], sae / "cfg.json"),
    ]


def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path, capsys):
    from interpscope.cli import build_parser

    for argv, victim in _reproductions(tmp_path / "files"):
        build_parser().parse_args(argv)  # each reproduction is a valid command line: only the paths are wrong
        before = victim.read_bytes()
        assert main(argv) == 2, argv
        said = capsys.readouterr().err
        assert "interpscope: error:" in said and ("overwrite its own input" in said or "same file" in said), said
        assert "Traceback" not in said
        assert victim.read_bytes() == before, argv  # nothing was written


def test_outputs_beside_their_inputs_are_still_written(tmp_path):
    from interpscope.cli import build_parser
    from interpscope.cli.common import refuse_outputs_over_inputs

    (tmp_path / "sae").mkdir()
    (tmp_path / "sae" / "cfg.json").write_text("{}")
    for argv in (["sae", "bench", "--sae", str(tmp_path / "sae"), "--json", str(tmp_path / "bench.json")],
                 ["sae", "bench", "--sae", str(tmp_path / "sae"), "--json", str(tmp_path / "sae" / "new.json")],
                 ["sae", "bench", "--sae", str(tmp_path / "sae"), "--json", "-"]):
        refuse_outputs_over_inputs(build_parser().parse_args(argv))  # a new file, even in the folder: allowed
