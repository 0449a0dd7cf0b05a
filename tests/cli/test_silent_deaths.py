"""Silent deaths (issue 45.24): a full data directory while the activation cache is written killed `sae train` and
`sae sweep` with a bus error (rc 135) and no message, since the cache was written through a memory map; a killed
`sae store` could leave `<store>.partial/` that no rerun removed. (The refusals before any work, a disk with no room
and a sweep wider than memory, are rows of tests/cli/test_bad_input_battery.py.)"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpscope.cli import main
from tests.sae_store_tiny import HOOK, random_sae_folder, save_tiny_lm, tiny_lm

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["sae", "train", "--hook", HOOK, "--tokens", "512", "--context", "32", "--batch-size", "128", "--width",
         "32"]


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    root = tmp_path_factory.mktemp("deaths")
    lm = tiny_lm()
    return {"lm": lm, "model": save_tiny_lm(root / "model"), "sae": random_sae_folder(lm, root / "sae", d_sae=16)}


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line.rsplit("\r", 1)[-1].strip() for line in err.split("\n")]
    lines = [line for line in lines if line]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("interpscope: error: "), err
    return lines[0]


def test_a_data_directory_too_small_for_the_cache_is_one_line_not_a_bus_error(fx, tmp_path):
    """The real thing where a tmpfs can be mounted (root): the data directory on a 1 MB tmpfs, a cache of 4 MB.
    Before the fix the child died of SIGBUS (rc 135 in a shell) with nothing on stderr."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the patched tests below cover the same paths)")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        env = dict(os.environ, INTERPSCOPE_DATA_DIR=str(disk), PYTHONPATH=str(ROOT / "backend"))
        child = subprocess.run([sys.executable, "-m", "interpscope.cli", *TRAIN, "--model", str(fx["model"]),
                                "--cache-tokens", "65536", "--out", str(tmp_path / "run")],
                               env=env, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert child.returncode == 2, (child.returncode, child.stderr[-2000:])
    assert "activation cache needs" in child.stderr and "Traceback" not in child.stderr
    assert not (tmp_path / "run").exists()  # refused before the output folder was made


@pytest.mark.parametrize("command", ["sae train", "sae sweep"])
def test_no_room_to_reserve_the_cache_is_one_line(command, fx, tmp_path, monkeypatch, capsys):
    """The disk reports room, then has none when the cache's blocks are reserved (another writer took it)."""
    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    argv = (TRAIN if command == "sae train" else
            ["sae", "sweep", "--hook", HOOK, "--archs", "relu", "--sparsity", "1", "--width", "32", "--tokens", "512",
             "--context", "32", "--batch-size", "128", "--eval-tokens", "64"])
    code = main(argv + ["--model", str(fx["model"]), "--cache-tokens", "512", "--out", str(tmp_path / "run")])
    line = _one_line(capsys)
    assert code == 2 and "No space left on device writing" in line and "acts.partial" in line


def test_a_disk_that_fills_while_the_cache_is_written_is_one_line_and_the_rerun_resumes(fx, tmp_path, monkeypatch,
                                                                                       capsys, data_dir):
    argv = TRAIN + ["--model", str(fx["model"]), "--cache-tokens", "2048", "--cache-batch-size", "8", "--out"]
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "reference-data"))
    assert main(argv + [str(tmp_path / "reference")]) == 0  # uninterrupted, in a data directory of its own
    reference = next((tmp_path / "reference-data" / "activations").iterdir())
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data_dir))
    real_pwrite, calls = os.pwrite, []

    def filling(fd, data, offset):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", filling)
    argv = argv + [str(tmp_path / "run")]
    capsys.readouterr()
    assert main(argv) == 2
    line = _one_line(capsys)
    assert "No space left on device writing" in line and "acts.partial" in line
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert main(argv) == 0, capsys.readouterr().err
    caches = [p for p in (data_dir / "activations").iterdir() if (p / "meta.json").is_file()]
    assert len(caches) == 1
    assert (caches[0] / "acts.bin").read_bytes() == (reference / "acts.bin").read_bytes()


def test_a_store_killed_after_it_was_installed_leaves_no_partial_folder_after_a_rerun(fx, tmp_path, monkeypatch):
    """A kill between installing the finished store and removing <store>.partial: the rerun, which finds the store
    built with the same settings and returns it, now removes the unfinished-build folder it left (only the files its
    marker lists)."""
    from interpscope.outputs import MARKER, OutputFolder
    from interpscope.sae.store import build_store

    options = dict(n_tokens=256, context_size=32, batch_size=2)
    real = OutputFolder.remove_all

    def killed(self):
        if self.path.name.endswith(".partial"):
            raise KeyboardInterrupt  # the process dies here
        return real(self)

    monkeypatch.setattr(OutputFolder, "remove_all", killed)
    with pytest.raises(KeyboardInterrupt):
        build_store(fx["lm"], fx["sae"], tmp_path / "store", **options)
    partial = tmp_path / "store.partial"
    assert (tmp_path / "store" / "manifest.json").is_file() and partial.is_dir()
    (partial / "notes.txt").write_text("a person put this here")
    monkeypatch.setattr(OutputFolder, "remove_all", real)
    assert build_store(fx["lm"], fx["sae"], tmp_path / "store", **options) == tmp_path / "store"
    # ours gone (the marker, listing nothing now, stays while the folder holds the person's file), theirs kept
    assert sorted(p.name for p in partial.iterdir()) == [MARKER, "notes.txt"]
    assert json.loads((partial / MARKER).read_text())["files"] == []
    (partial / "notes.txt").unlink()
    build_store(fx["lm"], fx["sae"], tmp_path / "store", **options)
    assert not partial.exists()


def test_a_store_killed_while_claiming_its_partial_folder_resumes_and_cleans_it(fx, tmp_path):
    """A kill while the unfinished-build folder's first marker was written leaves only that marker's temporary file:
    the rerun takes the folder as its own (it was: nothing else is in it) and removes it when the store is built."""
    from interpscope import atomic
    from interpscope.outputs import MARKER
    from interpscope.sae.store import build_store

    partial = tmp_path / "store.partial"
    partial.mkdir()
    (partial / (atomic.temp_prefix(partial / MARKER, 4194305) + "abcdefgh.tmp")).write_text('{"tool": "inter')
    out = build_store(fx["lm"], fx["sae"], tmp_path / "store", n_tokens=256, context_size=32, batch_size=2)
    assert json.loads((out / "manifest.json").read_text())["n_seqs"] == 8
    assert not partial.exists()
