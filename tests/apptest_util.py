"""Open one page of the app under streamlit.testing, the way the navigation would."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def open_page(page: str, timeout: float = 180, **state) -> AppTest:
    """Run app.py (sidebar + navigation), switch to `page` (e.g. "pages/relevance.py") and run it.

    Keyword arguments pre-set session_state (widget keys) before the first run. Later `.run()` calls rerun the
    page with the sidebar state kept.
    """
    at = AppTest.from_file(APP, default_timeout=timeout)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    if page != "pages/home.py":
        at.switch_page(str(ROOT / page))
        at.run()
    return at
