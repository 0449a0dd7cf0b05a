"""backend.paths: server mode confines typed paths to the allowed roots; run and store names are plain names."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.config import ASSETS_DIR, InterpscopeError
from backend.paths import allowed_roots, hub_cached, looks_like_path, model_choice, plain_name, user_path


@pytest.fixture
def server(monkeypatch, tmp_path):
    """Server mode with a private data dir and Hugging Face cache, and no operator roots."""
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    (tmp_path / "hub").mkdir()
    return tmp_path


def refusal(text: str) -> str:
    with pytest.raises(InterpscopeError) as err:
        user_path(text, "corpus")
    return str(err.value)


def test_roots_are_data_dir_assets_and_hf_cache(server):
    roots = {root.role: root.path for root in allowed_roots()}
    assert roots == {"the data directory": (server / "data").resolve(), "the bundled assets": ASSETS_DIR.resolve(),
                     "the Hugging Face cache": (server / "hub").resolve()}


def test_paths_inside_the_roots_resolve(server):
    assert user_path(str(ASSETS_DIR / "corpus" / "austen"), "corpus") == (ASSETS_DIR / "corpus" / "austen").resolve()
    assert user_path(f"  {server / 'data' / 'not-yet'}  ", "corpus") == (server / "data" / "not-yet").resolve()


def test_outside_the_roots_one_message_whether_or_not_it_exists(server):
    messages = {refusal(path) for path in ("/etc/passwd", "/etc/shadow", "/nonexistent", "/etc",
                                            str(server / "elsewhere"), "~root/.ssh", "~no-such-user-xyz/a")}
    assert len(messages) == 1
    message = messages.pop()
    assert "allowed folders" in message and "the data directory" in message
    assert str(server) not in message and str(ASSETS_DIR) not in message and "/etc" not in message


def test_dotdot_traversal_out_of_a_root_is_refused(server):
    escape = str(ASSETS_DIR / "corpus" / ".." / ".." / ".." / ".." / "etc" / "passwd")
    assert "allowed folders" in refusal(escape)
    assert user_path(str(ASSETS_DIR / "corpus" / ".." / "models"), "folder") == (ASSETS_DIR / "models").resolve()


def test_symlink_escaping_a_root_is_refused(server):
    data = server / "data"
    data.mkdir(exist_ok=True)
    (data / "to-etc").symlink_to("/etc")
    (data / "to-assets").symlink_to(ASSETS_DIR)
    assert "allowed folders" in refusal(str(data / "to-etc" / "passwd"))
    assert user_path(str(data / "to-assets" / "corpus"), "corpus") == (ASSETS_DIR / "corpus").resolve()


def test_operator_roots_extend_the_allowed_folders(server, monkeypatch):
    extra, other = server / "extra", server / "other"
    extra.mkdir()
    other.mkdir()
    assert "allowed folders" in refusal(str(extra / "corpus.txt"))
    monkeypatch.setenv("INTERPSCOPE_ALLOWED_ROOTS", os.pathsep.join([str(extra), str(other)]))
    assert user_path(str(extra / "corpus.txt"), "corpus") == (extra / "corpus.txt").resolve()
    assert user_path(str(other), "corpus") == other.resolve()
    assert "INTERPSCOPE_ALLOWED_ROOTS" in refusal("/etc/passwd")


def test_outside_server_mode_any_path_is_allowed(monkeypatch, tmp_path):
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)
    assert user_path("/etc/passwd", "corpus") == Path("/etc/passwd").resolve()
    assert user_path(str(tmp_path / ".." / tmp_path.name), "corpus") == tmp_path.resolve()
    with pytest.raises(InterpscopeError, match="Give a corpus"):
        user_path("  ", "corpus")


@pytest.mark.parametrize("name", ["run-1", "smollm2-135m-blocks.15.hook_resid_post", "a", "_x", "A.b-c_9", "x" * 64])
def test_plain_names_pass(name):
    assert plain_name(f" {name} ", "run name") == name


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", "/x", "a\\b", "", "x" * 65, "a b", "é", "a\x00"])
def test_other_names_are_refused(name):
    with pytest.raises(InterpscopeError, match="run name must be a plain name"):
        plain_name(name, "run name")


def test_model_text_shape_decides_path_or_hub_id():
    for path in ("/etc/shadow", "~/m", "./m", "../m", "a/b/c", "a\\b", "a b"):
        assert looks_like_path(path), path
    for hub_id in ("gpt2", "HuggingFaceTB/SmolLM2-135M", "EleutherAI/pythia-70m"):
        assert not looks_like_path(hub_id), hub_id


def test_server_mode_takes_hub_ids_only_from_the_cache(server):
    with pytest.raises(InterpscopeError, match="not in this server's Hugging Face cache"):
        model_choice("gpt2")
    snapshot = server / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert hub_cached("org/tiny") and model_choice("org/tiny") == "org/tiny"
    assert model_choice("adder") == "adder"
    with pytest.raises(InterpscopeError, match="allowed folders"):
        model_choice("/etc")
