"""Safe serving: the server binds 127.0.0.1 unless asked, server mode confines typed paths and names in the
pages, and an unexpected error reaches the page as one line (the traceback goes to the server log)."""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

from interpscope.config import ASSETS_DIR, InterpscopeError
from tests.apptest_util import ROOT, open_page

ADDER = ASSETS_DIR / "models" / "adder"
SERVE_APP = ROOT / "scripts" / "serve_app.py"
FOLDER = "A folder on this machine…"


def load_serve_app():
    spec = importlib.util.spec_from_file_location("serve_app", SERVE_APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than 127.x (None when it has none)."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = [a for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", out) if not a.startswith("127.")]
    if not found:
        try:
            found = [a for a in [socket.gethostbyname(socket.gethostname())] if not a.startswith("127.")]
        except OSError:
            found = []
    return found[0] if found else None


def healthy(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/_stcore/health", timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


def serve(log: Path, address_env: str | None) -> tuple[subprocess.Popen, int]:
    """serve_app.py with run-app.sh's arguments (no address flag), healthy on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("INTERPSCOPE_ADDRESS", "STREAMLIT_SERVER_ADDRESS")}
    if address_env is not None:
        env["INTERPSCOPE_ADDRESS"] = address_env
    process = subprocess.Popen([sys.executable, str(SERVE_APP), "--server.port", str(port), "--server.headless",
                                "true", "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                               stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 90
    while time.time() < deadline and process.poll() is None:
        if healthy("127.0.0.1", port):
            return process, port
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the server did not start; see {log}:\n{log.read_text()}")


def listening_on(pid: int, port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def test_default_server_listens_on_loopback_only(tmp_path):
    process, port = serve(tmp_path / "server.log", address_env=None)
    try:
        assert listening_on(process.pid, port) == {"127.0.0.1"}
        other = non_loopback_ipv4()
        if other:
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=3).close()
    finally:
        stop(process)
    assert "WARNING" not in (tmp_path / "server.log").read_text()


def test_interpscope_address_serves_all_interfaces_with_a_warning(tmp_path):
    process, port = serve(tmp_path / "server.log", address_env="0.0.0.0")
    try:
        assert listening_on(process.pid, port) == {"0.0.0.0"}
        other = non_loopback_ipv4()
        if other:
            assert healthy(other, port)
    finally:
        stop(process)
    log = (tmp_path / "server.log").read_text()
    assert "WARNING: Interpscope listens on 0.0.0.0" in log
    assert "no authentication" in log and "type local paths" in log and "--shared" in log


@pytest.fixture
def serve_app(monkeypatch, tmp_path):
    """scripts/serve_app.py as a module, with no Streamlit options set in the environment or config files."""
    for key in [k for k in os.environ if k.startswith("STREAMLIT_")] + ["INTERPSCOPE_ADDRESS"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return load_serve_app()


def test_safe_defaults_and_explicit_options_win(serve_app, monkeypatch, tmp_path):
    args = serve_app.streamlit_args(["--server.port", "9"])
    assert args[:2] == ["run", str(ROOT / "app.py")] and args[-2:] == ["--server.port", "9"]
    assert {"--server.address=127.0.0.1", "--server.fileWatcherType=none", "--client.showErrorDetails=none",
            "--server.maxUploadSize=20", "--runner.magicEnabled=false"} <= set(args)
    assert serve_app.effective_address(args) == "127.0.0.1"
    given = ["--server.address", "10.1.2.3", "--client.showErrorDetails=full"]
    args = serve_app.streamlit_args(given)
    assert args[-3:] == given and not any(a.startswith(("--server.address=", "--client.showErrorDetails="))
                                          for a in args[:-3])
    assert serve_app.effective_address(args) == "10.1.2.3"
    monkeypatch.setenv("INTERPSCOPE_ADDRESS", "0.0.0.0")
    assert "--server.address=0.0.0.0" in serve_app.streamlit_args([])
    monkeypatch.setenv("STREAMLIT_SERVER_FILE_WATCHER_TYPE", "poll")
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[server]\nmaxUploadSize = 5\n')
    args = serve_app.streamlit_args([])
    assert not any(a.startswith(("--server.fileWatcherType", "--server.maxUploadSize")) for a in args)


def test_loopback_addresses(serve_app):
    assert all(serve_app.is_loopback(a) for a in ("127.0.0.1", "localhost", "::1", "127.0.1.1"))
    assert not any(serve_app.is_loopback(a) for a in ("", "0.0.0.0", "::", "192.0.2.2", "example.org"))


@pytest.fixture
def no_server_mode(monkeypatch):
    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE", raising=False)


@pytest.fixture
def server_mode(monkeypatch, tmp_path):
    """Server mode with an empty data dir and Hugging Face cache of its own."""
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    return tmp_path


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Names the pages ask to load."""
    import pages._common as common

    names: list[str] = []
    real = common.load_model

    def recording(name, *args, **kwargs):
        names.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(common, "load_model", recording)
    return names


def open_with_model(path: str, page: str = "pages/home.py", **state):
    from app import OTHER

    at = open_page(page, model_choice=OTHER, model_custom=path, **state)
    assert not at.exception, at.exception
    return at


def family(at) -> str | None:
    return next((m.value for m in at.metric if m.label == "Family"), None)


def test_server_mode_model_path_outside_the_roots_same_message_nothing_loaded(server_mode, loads):
    errors = []
    for path in ("/etc/shadow", "/nonexistent", str(ADDER / ".." / ".." / ".." / ".." / "etc")):
        at = open_with_model(path)
        errors.append([e.value for e in at.error])
        assert family(at) is None
        assert at.text_input(key="model_custom").value == path
    assert errors[0] == errors[1] == errors[2] and len(errors[0]) == 1
    assert "allowed folders" in errors[0][0] and "/etc" not in errors[0][0]
    assert not loads


def test_server_mode_model_folder_inside_a_root_loads(server_mode):
    assert family(open_with_model(str(ADDER))) == "gpt2"


def test_server_mode_operator_roots_extend_the_allowed_folders(server_mode, monkeypatch):
    outside = server_mode / "models"
    shutil.copytree(ADDER, outside / "adder")
    at = open_with_model(str(outside / "adder"))
    assert family(at) is None and "allowed folders" in at.error[0].value
    monkeypatch.setenv("INTERPSCOPE_ALLOWED_ROOTS", str(outside))
    assert family(open_with_model(str(outside / "adder"))) == "gpt2"


def test_outside_server_mode_local_folders_load_as_before(no_server_mode, tmp_path):
    shutil.copytree(ADDER, tmp_path / "adder")
    assert family(open_with_model(str(tmp_path / "adder"))) == "gpt2"
    at = open_with_model("/etc")
    assert any("not a Hugging Face model folder" in e.value for e in at.error)


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*")) if folder.exists() else []


def test_server_mode_training_page_refuses_outside_corpus_and_path_names(server_mode):
    at = open_page("pages/sae_training.py", model_choice="adder")
    assert not at.exception, at.exception
    assert "sae_train_run" in [b.key for b in at.button]
    before = files_under(server_mode / "data")
    at.text_input(key="sae_train_corpus").set_value("/etc/passwd").run()
    assert any("allowed folders" in e.value for e in at.error)
    assert "sae_train_run" not in [b.key for b in at.button]
    at.text_input(key="sae_train_corpus").set_value(str(ASSETS_DIR / "corpus" / "austen")).run()
    assert not at.error and "sae_train_run" in [b.key for b in at.button]
    for name in ("..", "a/b", "/x"):
        at.text_input(key="sae_train_name").set_value(name).run()
        assert any("run name must be a plain name" in e.value for e in at.error), name
        assert "sae_train_run" not in [b.key for b in at.button]
    assert not at.exception
    assert files_under(server_mode / "data") == before


def test_server_mode_sae_folder_outside_the_roots(server_mode):
    at = open_page("pages/sae_overview.py", model_choice="adder", sae_overview_choice=FOLDER)
    errors = []
    for path in ("/etc", "/nonexistent"):
        at.text_input(key="sae_overview_path").set_value(path).run()
        errors.append([e.value for e in at.error])
    assert errors[0] == errors[1] and "allowed folders" in errors[0][0]
    shipped = next(p for p in (ASSETS_DIR / "saes").iterdir() if (p / "cfg.json").is_file())
    at.text_input(key="sae_overview_path").set_value(str(shipped)).run()
    assert not at.error and not at.exception
    assert any("features on blocks." in c.value for c in at.caption)


def test_server_mode_store_build_folder_outside_the_roots(server_mode):
    at = open_page("pages/sae_features.py", model_choice="adder", **{"sae-build-choice": "Other folder…"})
    assert not at.exception, at.exception
    at.text_input(key="sae-build-path").set_value("/etc").run()
    assert any("allowed folders" in e.value for e in at.error)
    assert at.button(key="sae-build-go").disabled


def test_unexpected_error_shows_one_line_and_logs_the_traceback(no_server_mode, monkeypatch, caplog):
    from interpscope.models.loading import LoadedModel

    def broken(self):
        raise ValueError(f"card broke reading {ROOT}/backend/secret.py\nsecond line")

    monkeypatch.setattr(LoadedModel, "card", broken)
    with caplog.at_level(logging.ERROR, logger="interpscope"):
        at = open_page("pages/home.py", model_choice="adder")
    assert not at.exception
    [text] = [e.value for e in at.error]
    assert text.startswith("Something went wrong (ValueError: card broke reading") and "server log" in text
    for leak in ("Traceback", 'File "', str(ROOT), "secret.py", "second line", "\n"):
        assert leak not in text
    record = next(r for r in caplog.records if r.name == "interpscope")
    assert record.exc_info and record.exc_info[0] is ValueError
    assert "Traceback" in caplog.text and "secret.py" in caplog.text


def test_interpscope_error_shows_just_its_message(no_server_mode, monkeypatch):
    from interpscope.models.loading import LoadedModel

    def broken(self):
        raise InterpscopeError("This model has no card.")

    monkeypatch.setattr(LoadedModel, "card", broken)
    at = open_page("pages/home.py", model_choice="adder")
    assert not at.exception
    assert [e.value for e in at.error] == ["This model has no card."]


@pytest.mark.parametrize("control", [StopException(), RerunException(RerunData())])
def test_streamlit_control_flow_passes_through(control):
    from pages._guard import run_page

    class Page:
        def run(self):
            raise control

    with pytest.raises(type(control)):
        run_page(Page())


# --- every path the server opens, ceilings, and paths shown (issue 22, item 13) ---------------------------------
def shown_texts(at) -> list[str]:
    """Every text a page shows: titles, markdown, captions, messages, metrics, select options and table cells."""
    texts = [e.value for kind in ("title", "header", "subheader", "markdown", "caption", "error", "warning", "info",
                                  "success", "code", "latex") for e in at.get(kind)]
    texts += [f"{m.label} {m.value}" for m in at.metric]
    texts += [str(option) for box in (*at.selectbox, *at.multiselect, *at.radio) for option in box.options]
    texts += [d.value.to_csv() for d in at.dataframe]
    return texts + [str(e.value) for e in at.exception]


def absolute_paths(at, *roots: Path) -> list[str]:
    """The shown texts that hold one of these absolute server folders."""
    return [text for text in shown_texts(at) for root in roots if str(root) in text]


def tiny_model_in(folder: Path, server_mode_root: Path, monkeypatch) -> Path:
    """A tiny GPT-2 saved as a model folder (server mode off while it is written and loaded once)."""
    from tests.sae_store_tiny import save_tiny_lm

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    model = save_tiny_lm(folder)
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    return model


def test_server_mode_build_store_refuses_a_cfg_model_name_outside_the_roots(server_mode, monkeypatch):
    from dataclasses import replace

    from interpscope.models.loading import cached_models
    from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

    monkeypatch.delenv("INTERPSCOPE_SERVER_MODE")
    outside = save_tiny_lm(server_mode / "outside" / "tiny")
    # The SAE is fitted on that folder's model under the name load_model gives it (its resolved path), without
    # loading it through the shared model cache: the cache is not cleared (the session's other models stay loaded),
    # and an entry for the outside folder below can only come from the page.
    named = replace(tiny_lm(), name=str(outside.resolve()))
    sae = random_sae_folder(named, server_mode / "data" / "saes" / "visitor-sae")
    assert str(outside.resolve()) in (sae / "cfg.json").read_text()  # cfg.json's model_name names the outside model
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    assert not [e for e in cached_models() if str(server_mode) in e["key"][0]]
    stores = server_mode / "data" / "sae_stores"
    at = open_page("pages/sae_features.py", model_choice="adder", **{"sae-build-choice": "Other folder…"})
    at.text_input(key="sae-build-path").set_value(str(sae)).run()
    assert not at.error and not at.button(key="sae-build-go").disabled  # the SAE folder itself is allowed
    at.button(key="sae-build-go").click().run()
    assert not at.exception, at.exception
    [message] = [e.value for e in at.error]
    assert "allowed folders" in message and "cfg.json" in message and str(server_mode) not in message
    assert not at.success
    assert not [e for e in cached_models() if str(server_mode) in e["key"][0]]  # the outside model never loaded
    assert not files_under(stores)


def test_server_mode_training_page_refuses_huge_token_counts(server_mode):
    at = open_page("pages/sae_training.py", model_choice="adder")
    assert "sae_train_run" in [b.key for b in at.button]
    before = files_under(server_mode / "data")
    for key, value, named in (("sae_train_tokens", 10**14, "training tokens"),
                              ("sae_train_cache_tokens", 10**12, "corpus tokens to cache")):
        at.number_input(key=key).set_value(value).run()
        assert not at.exception, at.exception
        [message] = [e.value for e in at.error]
        assert f"{value:,}" in message and "at most" in message and named in message, message
        assert "sae_train_run" not in [b.key for b in at.button]
        at.number_input(key=key).set_value(2048).run()
        assert not at.error and "sae_train_run" in [b.key for b in at.button]
    at.number_input(key="sae_train_width").set_value(262144).run()
    assert any("SAE width" in e.value for e in at.error)
    assert files_under(server_mode / "data") == before


def test_outside_server_mode_the_training_page_takes_large_token_counts(no_server_mode):
    at = open_page("pages/sae_training.py", model_choice="adder")
    at.number_input(key="sae_train_tokens").set_value(10**14).run()
    assert not at.error and "sae_train_run" in [b.key for b in at.button]


def test_server_mode_sae_browser_shows_no_absolute_server_path(server_mode):
    at = open_page("pages/sae_features.py", model_choice="adder", **{"sae-all-models": True})
    assert not at.exception, at.exception
    options = at.selectbox(key="sae-build-choice").options
    shipped = [o for o in options if o != "Other folder…"]
    assert shipped and all(o.startswith("assets/saes/") for o in shipped), options
    assert any("SAE `assets/saes/" in c.value for c in at.caption)
    assert not absolute_paths(at, ROOT, server_mode)


def test_server_mode_entropy_neurons_caption_names_the_store_relative(server_mode, monkeypatch):
    from app import OTHER
    from interpscope.entropy_neurons.page_store import StoreSpec
    from interpscope.entropy_neurons.store_build import build_neuron_store
    from interpscope.models import load_model

    model = tiny_model_in(server_mode / "data" / "models" / "tiny", server_mode, monkeypatch)
    build_neuron_store(load_model(str(model), device="cpu"), server_mode / "data" / "neurons" / "stores" / "tiny",
                       spec=StoreSpec(n_tokens=256, seq_len=32, top_contexts=4))
    at = open_page("pages/entropy_neurons.py", model_choice=OTHER, model_custom=str(model))
    assert not at.exception, at.exception
    assert any("the precomputed store [data dir]/neurons/stores/tiny" in c.value for c in at.caption), \
        [c.value for c in at.caption]
    assert not absolute_paths(at, ROOT, server_mode)


def test_server_mode_training_result_names_its_folder_relative(server_mode, monkeypatch):
    from app import OTHER

    model = tiny_model_in(server_mode / "data" / "models" / "tiny", server_mode, monkeypatch)
    at = open_page("pages/sae_training.py", model_choice=OTHER, model_custom=str(model))
    at.selectbox(key="sae_train_hook").set_value("blocks.0.hook_resid_post")
    at.multiselect(key="sae_train_archs").set_value(["relu"])
    for key, value in (("sae_train_width", 64), ("sae_train_tokens", 2048), ("sae_train_cache_tokens", 1024),
                       ("sae_train_batch", 256), ("sae_train_eval_tokens", 0)):
        at.number_input(key=key).set_value(value)
    at.text_input(key="sae_train_name").set_value("visitor-run").run()
    at.button(key="sae_train_run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    saved = [c.value for c in at.caption if "saved to" in c.value]
    assert saved and all("`[data dir]/saes/visitor-run/" in c for c in saved), saved
    assert not absolute_paths(at, ROOT, server_mode)


def test_server_mode_folder_model_is_named_relative_everywhere_and_loads_by_that_name(server_mode, monkeypatch):
    """A model loaded from a folder is named as display_path writes it ('[data dir]/models/tiny'): chart titles,
    captions and the name a store or cfg.json records; that name loads the same copy again."""
    import json

    from app import OTHER
    from interpscope.models import load_model

    model = tiny_model_in(server_mode / "data" / "models" / "tiny-named", server_mode, monkeypatch)
    lm = load_model(str(model), device="cpu")
    assert lm.name == "[data dir]/models/tiny-named"
    assert load_model(lm.name, device="cpu") is lm  # the shown name is a name it loads by
    at = open_page("pages/entropy_neurons.py", model_choice=OTHER, model_custom=str(model))
    assert not at.exception, at.exception
    titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]
    assert titles and any("[data dir]/models/tiny-named" in title for title in titles), titles
    assert not [title for title in titles if str(server_mode) in title or str(ROOT) in title], titles
    assert not absolute_paths(at, ROOT, server_mode)


def test_outside_server_mode_a_folder_model_keeps_its_full_path_name(no_server_mode, tmp_path):
    from interpscope.models import load_model
    from tests.sae_store_tiny import save_tiny_lm

    folder = save_tiny_lm(tmp_path / "tiny-full")
    assert load_model(str(folder), device="cpu").name == str(folder.resolve())


@pytest.mark.bundled
def test_server_mode_graph_page_refuses_outside_set_folders_from_a_link(monkeypatch, tmp_path):
    """Attribution graphs' set folder, from a shared link (?transcoders=folder&folder=...&run=1): every value outside
    the allowed folders gets the one refusal, whether it exists, is a file or a folder, and names no server path."""
    from streamlit.testing.v1 import AppTest

    from interpscope.models import smollm2
    from tests.apptest_util import APP

    converted = smollm2.convert()  # in the session's data directory: linked, not converted a second time
    (tmp_path / "data" / "models").mkdir(parents=True)
    (tmp_path / "data" / "models" / smollm2.CACHE_NAME).symlink_to(converted, target_is_directory=True)
    monkeypatch.setenv("INTERPSCOPE_SERVER_MODE", "1")
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("INTERPSCOPE_ALLOWED_ROOTS", raising=False)
    errors = []
    for value in ("/etc", "/proc/self/environ", "~/.bashrc", "/nonexistent", str(ASSETS_DIR / ".." / ".." / "etc")):
        at = AppTest.from_file(APP, default_timeout=300)
        at.query_params.update({"transcoders": "folder", "folder": value, "run": "1"})
        at.switch_page(str(ROOT / "pages/graphs.py"))  # the link opens the page itself
        at.run()
        assert not at.exception, at.exception
        errors.append([e.value for e in at.error])
    assert all(found == errors[0] for found in errors) and len(errors[0]) == 1, errors
    assert "allowed folders" in errors[0][0]
    assert "/etc" not in errors[0][0] and "bashrc" not in errors[0][0] and str(Path.home()) not in errors[0][0]
