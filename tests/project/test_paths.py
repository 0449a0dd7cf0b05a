"""interpscope.paths: server mode confines typed paths to the allowed roots; run and store names are plain names."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.models.registry import model_choice
from interpscope.paths import allowed_roots, hub_cached, looks_like_path, plain_name, user_path


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


# --- every path the server opens, not only typed ones (issue 22, item 13) --------------------------------------
SECRET = "The outside secret paragraph that a shared server must never read for a visitor, however it is linked."


def outside_secret(server: Path) -> Path:
    """A text file outside every allowed root (the test's tmp folder is not one)."""
    secret = server / "outside" / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(SECRET + "\n")
    return secret


def corpus_with_symlink(server: Path) -> Path:
    """A corpus folder in the data dir: one real file and a symlink to a file outside the roots."""
    corpus = server / "data" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "mine.txt").write_text("A paragraph of the visitor's own corpus, long enough to be kept as one.\n")
    (corpus / "zz-link.txt").symlink_to(outside_secret(server))
    return corpus


def test_corpus_folder_walk_refuses_a_symlink_to_an_outside_file(server):
    from interpscope.corpus import paragraphs

    corpus = corpus_with_symlink(server)
    with pytest.raises(InterpscopeError) as err:
        paragraphs(corpus, split="all")
    message = str(err.value)
    assert "allowed folders" in message and "zz-link.txt" in message
    assert str(server) not in message and "secret" not in message
    (corpus / "zz-link.txt").unlink()
    assert paragraphs(corpus, split="all") == [
        "A paragraph of the visitor's own corpus, long enough to be kept as one."]


def test_corpus_symlinked_file_given_directly_is_refused(server):
    from interpscope.corpus import paragraphs

    corpus = corpus_with_symlink(server)
    with pytest.raises(InterpscopeError, match="allowed folders"):
        paragraphs(corpus / "zz-link.txt", split="all")


def test_outside_server_mode_the_symlinked_file_is_read(server, monkeypatch):
    from interpscope.corpus import paragraphs

    corpus = corpus_with_symlink(server)
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    assert SECRET in paragraphs(corpus, split="all")


def test_model_folder_outside_the_roots_is_not_loaded(server):
    from interpscope.models import load_model

    outside = server / "outside" / "adder"
    shutil.copytree(ASSETS_DIR / "models" / "adder", outside)
    with pytest.raises(InterpscopeError, match="allowed folders"):
        load_model(str(outside), device="cpu")
    linked = server / "data" / "models" / "adder"  # a folder inside the data dir whose weights lead outside
    linked.mkdir(parents=True)
    for child in outside.iterdir():
        (linked / child.name).symlink_to(child)
    with pytest.raises(InterpscopeError, match="allowed folders") as err:
        load_model(str(linked), device="cpu")
    assert str(server) not in str(err.value)
    assert load_model(str(ASSETS_DIR / "models" / "adder"), device="cpu").adapter.family == "gpt2"


def test_sae_cfg_model_name_outside_the_roots_is_refused(server, monkeypatch):
    from interpscope.models import load_model
    from interpscope.sae import load_sae
    from interpscope.sae.folder import sae_model_name
    from tests.sae_store_tiny import random_sae_folder, save_tiny_lm

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    model = save_tiny_lm(server / "outside" / "tiny")
    sae_folder = random_sae_folder(load_model(str(model), device="cpu"), server / "data" / "saes" / "tiny-sae")
    assert load_sae(sae_folder).cfg.model_name == str(model.resolve())
    assert sae_model_name(load_sae(sae_folder)) == str(model.resolve())  # a researcher's own machine: as named
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    sae = load_sae(sae_folder)  # the SAE itself is inside the data dir
    with pytest.raises(InterpscopeError, match="allowed folders") as err:
        sae_model_name(sae)
    assert "cfg.json" in str(err.value) and str(server) not in str(err.value)
    with pytest.raises(InterpscopeError, match="allowed folders"):
        load_model(sae.cfg.model_name, device="cpu")  # and load_model refuses it on its own


def test_sae_folder_with_a_file_leading_outside_is_refused(server, monkeypatch):
    from interpscope.models import load_model
    from interpscope.sae import load_sae
    from tests.sae_store_tiny import random_sae_folder, save_tiny_lm

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    model = save_tiny_lm(server / "data" / "tiny")
    real = random_sae_folder(load_model(str(model), device="cpu"), server / "outside" / "sae")
    linked = server / "data" / "saes" / "linked"
    linked.mkdir(parents=True)
    for child in real.iterdir():
        (linked / child.name).symlink_to(child)
    assert load_sae(linked).cfg.d_sae == load_sae(real).cfg.d_sae
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    with pytest.raises(InterpscopeError, match="allowed folders"):
        load_sae(linked)


def test_store_manifest_naming_an_outside_sae_is_refused(server):
    from interpscope.sae.store.layout import folder_of

    assert folder_of("assets/saes/x") == ASSETS_DIR / "saes" / "x"
    with pytest.raises(InterpscopeError, match="manifest"):
        folder_of(str(server / "outside" / "sae"))
    with pytest.raises(InterpscopeError, match="allowed folders"):
        folder_of("../../../../../../etc")


# --- ceilings on what a visitor asks for --------------------------------------------------------------------------
def test_server_mode_refuses_amounts_above_their_ceiling(server, monkeypatch):
    from interpscope.limits import SERVER_CEILINGS, ceiling, check_amounts

    with pytest.raises(InterpscopeError, match="at most 10,000,000 training tokens") as err:
        check_amounts(training_tokens=10**14)
    assert "100,000,000,000,000" in str(err.value) and "INTERPSCOPE_LIMIT_TRAINING_TOKENS" in str(err.value)
    with pytest.raises(InterpscopeError, match="corpus tokens to cache"):
        check_amounts(cache_tokens=10**12)
    with pytest.raises(InterpscopeError) as err:  # every amount over its ceiling, named in one line
        check_amounts(training_tokens=10**14, cache_tokens=10**12, sae_width=64)
    message = str(err.value)
    assert "(asked: 100,000,000,000,000)" in message and "(asked: 1,000,000,000,000)" in message
    assert "SAE width" not in message and "\n" not in message and "smaller numbers" in message
    for name in SERVER_CEILINGS:
        check_amounts(**{name: ceiling(name)})  # the ceiling itself is allowed
        with pytest.raises(InterpscopeError, match="This shared server allows at most"):
            check_amounts(**{name: ceiling(name) + 1})
    check_amounts(sae_k=None)  # an amount that does not apply
    monkeypatch.setenv("INTERPSCOPE_LIMIT_TRAINING_TOKENS", "2000")
    with pytest.raises(InterpscopeError, match="at most 2,000 training tokens"):
        check_amounts(training_tokens=2001)
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    check_amounts(training_tokens=10**14, cache_tokens=10**12)


# --- paths shown in pages -------------------------------------------------------------------------------------------
def test_display_paths_are_relative_to_their_root_and_read_back(server):
    from interpscope.paths import display_path

    data = server / "data"
    assert display_path(ASSETS_DIR / "saes" / "x") == "assets/saes/x"
    assert display_path(data / "saes" / "trained" / "run") == "[data dir]/saes/trained/run"
    assert display_path(server / "hub" / "models--a--b") == "[Hugging Face cache]/models--a--b"
    assert display_path(server / "elsewhere" / "thing") == "…/thing"
    assert display_path("smollm2-135m") == "smollm2-135m" and display_path("org/model") == "org/model"
    for path in (ASSETS_DIR / "saes" / "x", data / "saes" / "trained" / "run"):
        assert user_path(display_path(path), "folder") == path.resolve()


def test_display_paths_outside_server_mode_keep_outside_paths(monkeypatch, tmp_path):
    from interpscope.paths import display_path

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    assert display_path(tmp_path / "mine") == str(tmp_path / "mine")
    assert display_path(tmp_path / "data" / "x") == "[data dir]/x"


def test_listed_saes_and_neuron_stores_leading_outside_are_skipped_and_refused(server, monkeypatch):
    from interpscope.entropy_neurons.page_store import NEURON_STORES
    from interpscope.models import load_model
    from interpscope.sae.catalog import describe, list_saes
    from interpscope.sae.store.store import read_manifest
    from tests.sae_store_tiny import random_sae_folder, save_tiny_lm

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    real = random_sae_folder(load_model(str(save_tiny_lm(server / "data" / "tiny")), device="cpu"),
                             server / "outside" / "sae")
    linked = server / "data" / "saes" / "run" / "linked"
    linked.mkdir(parents=True)
    for child in real.iterdir():
        (linked / child.name).symlink_to(child)
    neurons = server / "data" / "neurons" / "stores" / "linked"
    neurons.mkdir(parents=True)
    (neurons / "manifest.json").symlink_to(outside_secret(server))
    assert "trained: run/linked" in list_saes() and neurons in NEURON_STORES.folders()
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    assert "trained: run/linked" not in list_saes() and neurons not in NEURON_STORES.folders()
    with pytest.raises(InterpscopeError, match="allowed folders"):
        describe(linked)
    with pytest.raises(InterpscopeError, match="allowed folders"):
        read_manifest(neurons)
