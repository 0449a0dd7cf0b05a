"""What Interpscope may delete or take for its own (issue 45.23): temporary files carry a tag only this data
directory's secret makes, so a person's `.notes.99999.bak.tmp` is never removed as a stale temporary file; new output
markers are signed, and a command's own working folder (`<store>.partial`) is used only with a signed marker; the
unsigned markers older versions wrote (the shipped stores carry them) keep working where a person names the folder.
The command-line reproductions are rows of tests/cli/test_bad_input_battery.py."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from interpscope import atomic
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.outputs import MARKER, OutputFolder, check_own_folder, read_marker, signed_marker

DEAD_PID = 4194305  # above Linux's largest pid: never a running process


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))


def test_only_tagged_temporary_files_are_ours(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    ours = folder / (atomic.temp_prefix(folder / "x.json", DEAD_PID) + "abcdefgh.tmp")
    ours.write_text("left by a kill")
    lookalikes = [".notes.99999.bak.tmp", f".x.json.{DEAD_PID}.0123456789abcdef.abcdefgh.tmp",
                  f".x.json.{DEAD_PID}.abcdefgh.tmp"]  # the last: the old, untagged name
    for name in lookalikes:
        (folder / name).write_text("a person's file")
    assert atomic.is_temp_name(ours.name) and not any(atomic.is_temp_name(name) for name in lookalikes)
    assert atomic.remove_stale_temps(folder) == [ours]
    assert sorted(p.name for p in folder.iterdir()) == sorted(lookalikes)
    key = tmp_path / "data" / atomic.KEY_FILE
    assert key.stat().st_size == 32 and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_running_writers_temporary_file_is_kept(tmp_path):
    (tmp_path / (atomic.temp_prefix(tmp_path / "x.json") + "abcdefgh.tmp")).write_text("being written")
    assert atomic.remove_stale_temps(tmp_path) == []


def test_another_data_directory_does_not_recognise_our_temporary_files(tmp_path, monkeypatch):
    name = atomic.temp_prefix(tmp_path / "x.json", DEAD_PID) + "abcdefgh.tmp"
    assert atomic.is_temp_name(name)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "other-data"))
    atomic.temp_prefix(tmp_path / "y.json")  # makes the other directory's own secret
    assert not atomic.is_temp_name(name)


def test_atomic_writes_leave_no_temporary_file_and_name_theirs_with_the_tag(tmp_path, monkeypatch):
    seen: list[str] = []
    real = atomic.tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, path = real(*args, **kwargs)
        seen.append(os.path.basename(path))
        return fd, path

    monkeypatch.setattr(atomic.tempfile, "mkstemp", spy)
    atomic.write_text(tmp_path / "a.txt", "hello")
    assert (tmp_path / "a.txt").read_text() == "hello" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt",
                                                                                                        "data"]
    assert len(seen) == 1 and atomic.is_temp_name(seen[0])


def test_new_markers_are_signed_and_a_copy_elsewhere_is_not(tmp_path, monkeypatch):
    out = OutputFolder.claim(tmp_path / "run", command="test")
    marker = read_marker(out.path)
    assert signed_marker(marker) and marker["created"] is True
    forged = dict(marker, id="f" * 32)
    assert not signed_marker(forged)
    assert not signed_marker({"tool": "interpscope", "command": "sae store", "created": True, "files": []})
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "other-data"))
    assert not signed_marker(marker)


def test_a_working_folder_without_a_signed_marker_is_refused(tmp_path):
    partial = tmp_path / "store.partial"
    assert check_own_folder(partial, "The unfinished build folder") == partial  # absent: fine
    partial.mkdir()
    assert check_own_folder(partial, "x") == partial  # empty: fine
    (partial / (atomic.temp_prefix(partial / MARKER, DEAD_PID) + "abcdefgh.tmp")).write_text("{")
    assert check_own_folder(partial, "x") == partial  # only our own temporary file: a kill while claiming it
    (partial / "notes.txt").write_text("a person's")
    with pytest.raises(InterpscopeError, match="not made by Interpscope"):
        check_own_folder(partial, "The unfinished build folder")
    (partial / MARKER).write_text(json.dumps({"tool": "interpscope", "command": "sae store", "created": True,
                                              "files": ["notes.txt"]}))
    with pytest.raises(InterpscopeError, match="not made by Interpscope"):
        check_own_folder(partial, "The unfinished build folder")
    assert (partial / "notes.txt").read_text() == "a person's"


def test_claiming_a_folder_holding_only_a_killed_claims_temporary_file_makes_it_ours(tmp_path):
    """A run killed while it wrote a new folder's first marker: the next run takes the folder as created by
    Interpscope (so it removes it when done), not as a person's."""
    folder = tmp_path / "store.partial"
    folder.mkdir()
    (folder / (atomic.temp_prefix(folder / MARKER, DEAD_PID) + "abcdefgh.tmp")).write_text("{")
    owned = OutputFolder.claim(folder, command="sae store")
    assert owned.marker["created"] is True and sorted(p.name for p in folder.iterdir()) == [MARKER]
    owned.remove_all()
    assert not folder.exists()


@pytest.mark.parametrize("store", sorted(p.name for p in (ASSETS_DIR / "sae_stores").iterdir()
                                         if (p / "manifest.json").is_file()))
def test_shipped_stores_open_and_their_unsigned_markers_still_work(store, tmp_path):
    """The shipped stores carry markers written before signing: they open, and a command that writes into a copy
    (sae explain claims it with force) keeps the marker as it was and may still replace the files it lists. (A copy
    does not open as a store: the shipped ones share their corpus tokens from assets/.)"""
    from interpscope.sae.store import FeatureStore

    shipped = ASSETS_DIR / "sae_stores" / store
    assert FeatureStore(shipped).card(0).id == 0
    copy = Path(shutil.copytree(shipped, tmp_path / store))
    before = (copy / MARKER).read_bytes()
    marker = read_marker(copy)
    assert marker is not None and not signed_marker(marker)
    owned = OutputFolder.claim(copy, force=True, command="sae explain")
    assert json.loads((copy / MARKER).read_bytes()) == json.loads(before)  # not rewritten into a new shape
    listed = next(name for name in marker["files"] if (copy / name).is_file())
    owned.remove(listed)
    assert not (copy / listed).exists() and (copy / "manifest.json").is_file()
