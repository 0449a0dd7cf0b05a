"""Run the Streamlit app with its st.navigation pages only, on 127.0.0.1 unless asked otherwise.

Streamlit treats a `pages/` folder beside the entry script as its old multipage convention until the entry
script first calls st.navigation; a shared link opened as a session's first request then shows a spurious
"Page not found" dialog. Declaring the app navigation-only before the server starts avoids that.

Safe defaults (each one yields to the same option given on the command line, in STREAMLIT_* environment
variables or in a Streamlit config file): listen on 127.0.0.1 ($INTERPSCOPE_ADDRESS overrides), no file
watcher, no error details in the browser, uploads up to 20 MB, and no "magic" (runner.magicEnabled: Streamlit
then compiles a page from its source instead of parsing it into Python AST objects and rewriting them; on
CPython 3.11.7 concurrent sessions' ast.parse calls share one recursion counter and now and then fail with
"SystemError: AST constructor recursion depth mismatch" (CPython gh-106905); no page relies on magic). `--shared` turns
on server mode (INTERPSCOPE_SERVER_MODE=1: typed paths confined to the allowed folders, nothing downloaded for a
visitor).
Usage: python scripts/serve_app.py [--shared] [streamlit run options...]
"""
from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDRESS_ENV = "INTERPSCOPE_ADDRESS"
SERVER_MODE_ENV = "INTERPSCOPE_SERVER_MODE"
DEFAULTS = {
    "server.fileWatcherType": "none",
    "client.showErrorDetails": "none",
    "server.maxUploadSize": "20",
    "runner.magicEnabled": "false",
}


def given_options(args: list[str]) -> dict[str, str]:
    """Options on the command line (`--key value` or `--key=value`); the last one of a key wins."""
    found: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--") or "." not in arg:
            continue
        key, eq, value = arg[2:].partition("=")
        found[key] = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    return found


def config_file_value(key: str) -> str | None:
    """The option's value in a Streamlit config file (global, project or beside app.py), last file winning."""
    import tomllib
    from streamlit.config import get_config_files

    section, _, name = key.partition(".")
    value = None
    for path in [*get_config_files("config.toml"), str(ROOT / ".streamlit" / "config.toml")]:
        try:
            with open(path, "rb") as handle:
                table = tomllib.load(handle).get(section) or {}
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if name in table:
            value = str(table[name])
    return value


def env_value(key: str) -> str | None:
    """The option's value in its STREAMLIT_* environment variable."""
    from streamlit.string_util import to_snake_case

    return os.environ.get(f"STREAMLIT_{to_snake_case(key.replace('.', '_')).upper()}")


def set_elsewhere(key: str) -> bool:
    """Whether an option is set in a STREAMLIT_* environment variable or a Streamlit config file."""
    return env_value(key) is not None or config_file_value(key) is not None


def is_loopback(address: str) -> bool:
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(address: str, shared: bool) -> str:
    """What listening on a non-loopback address hands to anyone who can reach the port."""
    paths = ("Server mode is on: typed paths are confined to the allowed folders." if shared else
             "Server mode is off, so they can also type local paths and load any folder or file this user can "
             "read; start with --shared (or INTERPSCOPE_SERVER_MODE=1) to confine them.")
    return (f"WARNING: Interpscope listens on {address or 'all interfaces'}, not only on this machine, with no "
            f"authentication: anyone who can reach the port can run the models and read the data directory's "
            f"stores and SAEs. {paths} Beyond a trusted network, put it behind an authenticating reverse proxy "
            f"or an SSH tunnel.")


def streamlit_args(args: list[str]) -> list[str]:
    """The `streamlit run` arguments: the safe defaults the user did not set, then the user's own."""
    given = given_options(args)
    defaults = dict(DEFAULTS)
    defaults["server.address"] = os.environ.get(ADDRESS_ENV, "").strip() or "127.0.0.1"
    added = [f"--{key}={value}" for key, value in defaults.items() if key not in given and not set_elsewhere(key)]
    return ["run", str(ROOT / "app.py"), *added, *args]


def effective_address(run_args: list[str]) -> str:
    """The address the server will listen on ('' = all interfaces): flag, then environment, then config file."""
    for value in (given_options(run_args).get("server.address"), env_value("server.address"),
                  config_file_value("server.address")):
        if value is not None:
            return value
    return ""


def main(argv: list[str]) -> int:
    # pandas and transformers are imported here, once, before any session's thread can race another into a
    # half-initialised module. pandas: plotly takes sys.modules["pandas"] as it is (get_module(should_load=False)),
    # so a figure built while another session's thread was still importing pandas failed with "partially
    # initialized module 'pandas' has no attribute 'Series'" (eight pages loaded at once, seen once under load)
    import pandas  # noqa: F401
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.web import cli

    # transformers is a lazy module: imported here, once, before any session thread can race another into a
    # half-initialised module (seen as "cannot import name 'AutoConfig'" when a first load raced a rerun)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    args = [arg for arg in argv if arg != "--shared"]
    if len(args) != len(argv):
        os.environ[SERVER_MODE_ENV] = "1"
    shared = os.environ.get(SERVER_MODE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if shared:
        os.environ["HF_HUB_OFFLINE"] = "1"
        print("Interpscope server mode: paths typed into pages must lie inside the data directory, the bundled "
              "assets, the Hugging Face cache or the folders in INTERPSCOPE_ALLOWED_ROOTS; Hugging Face ids load "
              "only from the local cache (HF_HUB_OFFLINE=1); run and store names are plain names; amounts a visitor "
              "sets are capped (backend/interpscope/limits.py, INTERPSCOPE_LIMIT_<NAME>).", file=sys.stderr)
    run_args = streamlit_args(args)
    address = effective_address(run_args)
    if not is_loopback(address):
        print(exposure_warning(address, shared), file=sys.stderr)
    PagesManager.uses_pages_directory = False
    return cli.main(run_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
