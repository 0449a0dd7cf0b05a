"""Open one page of the app under streamlit.testing, the way the navigation would."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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


@contextmanager
def concurrent_apptests() -> Iterator[None]:
    """Let several AppTests run at once in threads, as a real server runs several sessions.

    AppTest.run swaps a mock Runtime into the global `Runtime._instance` and patches `config.get_option` for the
    length of each run, then restores both: interleaved runs undo each other's swaps ("Runtime hasn't been
    created!"). Inside this block one shared mock runtime and one config patch stay in place for all runs, and
    each AppTest's own swaps land on a stand-in.
    """
    from unittest.mock import MagicMock

    from streamlit import config
    from streamlit.runtime import Runtime
    from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
    from streamlit.runtime.dataframe_source_manager import DataframeSourceManager
    from streamlit.runtime.media_file_manager import MediaFileManager
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.testing.v1 import app_test as app_test_module
    from streamlit.testing.v1.util import build_mock_config_get_option

    shared = MagicMock(spec=Runtime)
    shared.media_file_mgr = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
    shared.dataframe_source_mgr = DataframeSourceManager()
    shared.cache_storage_manager = MemoryCacheStorageManager()

    class StandIn:
        _instance = None

    saved = (app_test_module.Runtime, app_test_module.patch_config_options, Runtime._instance, config.get_option)
    app_test_module.Runtime = StandIn
    app_test_module.patch_config_options = lambda overrides: nullcontext()
    Runtime._instance = shared
    config.get_option = build_mock_config_get_option({"global.appTest": True})
    try:
        yield
    finally:
        (app_test_module.Runtime, app_test_module.patch_config_options, Runtime._instance,
         config.get_option) = saved
