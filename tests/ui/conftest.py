"""The browser fixtures: a running app (`streamlit run app.py` on a free localhost port), a real headless Chromium and
a fresh page in it, and the helpers that drive the app as a user would. bench/interactive.py uses them too."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

ARTEFACTS = ROOT / "test-artefacts"
CHROMIUM = os.environ.get("INTERPSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def artefacts() -> Path:
    ARTEFACTS.mkdir(exist_ok=True)
    return ARTEFACTS


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(log_path: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start `streamlit run app.py` on a free localhost port; return the process and its URL once healthy."""
    port = _free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "serve_app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none", "--runner.magicEnabled", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"streamlit did not start; see {log_path}")


def stop_app(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def open_from_sidebar(page, url: str, link: str):
    """Open the app at url and go to one page through the sidebar navigation, as a user would; returns the sidebar."""
    page.goto(url)
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.locator("[data-testid='stSelectbox']").first.wait_for(timeout=180_000)
    sidebar.get_by_role("link", name=link).click()
    return sidebar


def choose_view(page, name: str) -> None:
    """Click a page's view (its "View" segmented control) and wait for the page to finish."""
    page.get_by_role("radiogroup", name="View").get_by_role("radio", name=name, exact=True).first.click()
    wait_for_app(page)


def wait_for_app(page) -> None:
    """Wait in a browser page until Streamlit has finished running the script."""
    page.wait_for_selector("[data-testid='stApp']")
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)


@pytest.fixture(scope="session")
def app_server(artefacts):
    """URL of `streamlit run app.py` on a free localhost port, stopped after the session."""
    process, url = start_app(artefacts / "streamlit-server.log")
    yield url
    stop_app(process)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        raise RuntimeError(f"Debian chromium is required for browser tests ({CHROMIUM}); run scripts/setup.sh")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def browser_page(browser):
    """A fresh page (1400x1000) that accepts downloads."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    yield page
    context.close()
