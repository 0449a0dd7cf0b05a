"""The one storage layer (interpscope.stores): a store kind lists its stores shipped-then-local, finds one by name
or by manifest fields, round-trips its manifest atomically, takes a torn or missing manifest for "not a store",
refuses a folder it does not own, and on a shared server skips and refuses a store leading outside its roots."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from interpscope.config import InterpscopeError
from interpscope.stores import MANIFEST, StoreKind, portable_path, save_npy, save_npz, stored_folder


@pytest.fixture
def kind(tmp_path, monkeypatch):
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    return StoreKind(name="test store", shipped=tmp_path / "shipped", local=("test", "stores"),
                     build_hint="build it with `interpscope test store`", tag="interpscope-test-store", indent=1)


def _make(kind: StoreKind, folder, **fields):
    folder.mkdir(parents=True, exist_ok=True)
    kind.write_manifest(folder, kind.new_manifest(**fields))
    return folder


def test_local_root_follows_the_data_dir(kind, tmp_path, monkeypatch):
    assert kind.local_root() == tmp_path / "data" / "test" / "stores"
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "elsewhere"))
    assert kind.roots() == (tmp_path / "shipped", tmp_path / "elsewhere" / "test" / "stores")


def test_listing_is_shipped_then_local_each_sorted(kind, tmp_path):
    assert kind.listed() == []  # neither root exists yet
    local_b = _make(kind, kind.local_root() / "b", model_key="m1")
    local_a = _make(kind, kind.local_root() / "a", model_key="m2")
    shipped_z = _make(kind, kind.shipped / "z", model_key="m1")
    shipped_c = _make(kind, kind.shipped / "c", model_key="m3")
    (kind.shipped / "loose.txt").write_text("not a folder")
    (kind.local_root() / "empty").mkdir()
    assert kind.listed() == [shipped_c, shipped_z, local_a, local_b]
    assert [folder for folder, _ in kind.matching(model_key="m1")] == [shipped_z, local_b]
    assert next(kind.matching(model_key="m3"))[1] == {"kind": "interpscope-test-store", "model_key": "m3"}
    assert list(kind.matching(model_key="none")) == []


def test_lookup_by_name_prefers_the_shipped_store(kind):
    shipped = _make(kind, kind.shipped / "same", where="shipped")
    _make(kind, kind.local_root() / "same", where="local")
    local_only = _make(kind, kind.local_root() / "mine", where="local")
    assert kind.find("same") == shipped and kind.find("mine") == local_only and kind.find("absent") is None


def test_manifest_round_trip_is_atomic_and_keeps_its_bytes(kind, tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    manifest = kind.new_manifest(model="m", entries={"k": {"n": np.int64(3), "x": np.float32(0.5)}})
    assert list(manifest) == ["kind", "model", "entries"]
    path = kind.write_manifest(folder, manifest)
    assert path == folder / MANIFEST and os.listdir(folder) == [MANIFEST]  # no temporary file left behind
    plain = {"kind": "interpscope-test-store", "model": "m", "entries": {"k": {"n": 3, "x": 0.5}}}
    assert path.read_text(encoding="utf-8") == json.dumps(plain, indent=1)
    assert kind.manifest(folder) == plain == kind.read_manifest(folder)
    with pytest.raises(TypeError, match="cannot store"):
        kind.write_manifest(folder, {"bad": object()})
    assert kind.read_manifest(folder) == plain and os.listdir(folder) == [MANIFEST]  # the old one untouched


def test_a_format_version_is_recorded_first(tmp_path):
    versioned = StoreKind(name="feature store", shipped=tmp_path, local=("x",), build_hint="build it",
                          format_version=1)
    assert versioned.new_manifest(spec={}) == {"format_version": 1, "spec": {}}
    assert list(versioned.new_manifest(spec={}, n=2)) == ["format_version", "spec", "n"]


def test_a_torn_missing_or_foreign_manifest_is_not_a_store(kind):
    root = kind.local_root()
    good = _make(kind, root / "good")
    torn = root / "torn"
    torn.mkdir()
    (torn / MANIFEST).write_text('{"kind": "interpscope-test-store", "mod')
    missing = root / "missing"
    missing.mkdir()
    (missing / "layer0.npz").write_bytes(b"")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / MANIFEST).write_text(json.dumps({"kind": "interpscope-other-store"}))
    listish = root / "list"
    listish.mkdir()
    (listish / MANIFEST).write_text("[1, 2]")
    assert kind.listed() == [good]
    for folder in (torn, missing, foreign, listish):
        assert kind.manifest(folder) is None and not kind.is_store(folder)
    with pytest.raises(InterpscopeError, match="not valid JSON"):
        kind.read_manifest(torn)
    with pytest.raises(InterpscopeError, match=r"not a complete test store \(no manifest.json\); build it with"):
        kind.read_manifest(missing)
    with pytest.raises(InterpscopeError, match="is not a test store"):
        kind.read_manifest(foreign)


def test_an_untagged_kind_takes_any_json_object(tmp_path):
    untagged = StoreKind(name="feature store", shipped=tmp_path / "shipped", local=("x",), build_hint="build it")
    folder = tmp_path / "shipped" / "s"
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"format_version": 1, "spec": {}}))
    assert untagged.listed() == [folder] and untagged.read_manifest(folder)["spec"] == {}


def test_a_builder_only_writes_into_a_folder_it_owns(kind, tmp_path):
    assert kind.owned(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert kind.owned(tmp_path / "empty") is None
    mine = _make(kind, tmp_path / "mine", model_key="m")
    assert kind.owned(mine) == {"kind": "interpscope-test-store", "model_key": "m"}
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(InterpscopeError, match="exists and is not a test store; choose a new or empty folder"):
        kind.owned(other)
    with pytest.raises(InterpscopeError, match="^--out .* exists and is not a test store"):
        kind.owned(other, flag="--out")
    assert os.listdir(other) == ["keep.txt"]


def test_server_mode_skips_and_refuses_a_store_leading_outside(kind, tmp_path, monkeypatch):
    outside = _make(kind, tmp_path / "outside" / "real", model_key="m")
    inside = _make(kind, kind.local_root() / "inside", model_key="m")
    linked = kind.local_root() / "linked"
    linked.mkdir()
    (linked / MANIFEST).symlink_to(outside / MANIFEST)
    assert kind.listed() == [inside, linked]  # outside server mode a symlink is the owner's business
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    assert kind.listed() == [inside] and kind.find("linked") is None
    assert [folder for folder, _ in kind.matching(model_key="m")] == [inside]
    for folder in (linked, outside):
        with pytest.raises(InterpscopeError, match="allowed folders") as err:
            kind.read_manifest(folder)
        assert str(tmp_path) not in str(err.value)  # the refusal never shows the server's own paths
    assert kind.read_manifest(inside)["model_key"] == "m"
    with pytest.raises(InterpscopeError, match=r"^\[data dir\]/test/stores/gone is not a complete test store"):
        kind.read_manifest(kind.local_root() / "gone")  # a message in server mode names the root, not the path


def test_stored_folders_are_portable_and_confined(kind, tmp_path, monkeypatch):
    from interpscope.config import ASSETS_DIR, REPO_ROOT

    assert portable_path(ASSETS_DIR / "saes" / "x") == "assets/saes/x"
    assert portable_path(tmp_path / "sae") == str((tmp_path / "sae").resolve())
    assert stored_folder("assets/saes/x", "SAE folder") == REPO_ROOT / "assets" / "saes" / "x"
    assert stored_folder(str(tmp_path / "sae"), "SAE folder") == tmp_path / "sae"
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    assert stored_folder("assets/saes/x", "SAE folder") == (ASSETS_DIR / "saes" / "x").resolve()
    with pytest.raises(InterpscopeError, match="allowed folders"):
        stored_folder(str(tmp_path / "sae"), "SAE folder named in a manifest")


def test_array_files_are_written_atomically(tmp_path):
    counts = np.arange(6, dtype=np.int64).reshape(2, 3)
    save_npy(tmp_path / "counts.npy", counts)
    np.testing.assert_array_equal(np.load(tmp_path / "counts.npy"), counts)
    save_npz(tmp_path / "layer.npz", {"a": counts, "b": np.ones(2, dtype=np.float32)})
    save_npz(tmp_path / "plain.npz", {"a": counts}, compressed=False)
    with np.load(tmp_path / "layer.npz") as data:
        assert sorted(data.files) == ["a", "b"] and data["a"].tolist() == counts.tolist()
    with np.load(tmp_path / "plain.npz") as data:
        assert data["a"].tolist() == counts.tolist()
    with pytest.raises(ValueError):
        save_npy(tmp_path / "objects.npy", np.array([{"x": 1}], dtype=object))  # a store holds no pickles
    assert sorted(os.listdir(tmp_path)) == ["counts.npy", "layer.npz", "plain.npz"]
