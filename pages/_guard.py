"""Run the chosen page so that an error reaches the person as one clear line, and the server log in full.

A visitor never sees server stack frames or file paths: InterpscopeError shows its message; anything else is
logged with its traceback (logger "interpscope") and shown as its type and the first line of its message.
Streamlit's control flow (st.stop, st.rerun, st.switch_page) raises ScriptControlException, which passes.
"""
from __future__ import annotations

import logging
import re

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from interpscope.config import InterpscopeError

LOG = logging.getLogger("interpscope")
# An absolute path (or ~/...) inside an exception message: replaced before the message reaches a page.
PATH_IN_TEXT = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?[~/\\][^\s'\"(),;]+")


def _ensure_log_handler() -> None:
    """Give the "interpscope" logger a stderr handler once, unless logging is already configured."""
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)


def one_line(err: BaseException) -> str:
    """'TypeName: first line of the message', without paths, at most 200 characters."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    first = PATH_IN_TEXT.sub("…", first)
    first = first if len(first) <= 200 else first[:199] + "…"
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def run_page(page) -> None:
    """page.run(), with errors turned into one line in the page."""
    try:
        page.run()
    except ScriptControlException:
        raise
    except InterpscopeError as err:
        st.error(str(err))
    except Exception as err:  # noqa: BLE001 - the last place an error can be caught before the visitor sees it
        _ensure_log_handler()
        LOG.exception("Uncaught error on page %s", getattr(page, "title", page))
        st.error(f"Something went wrong ({one_line(err)}). The details are in the server log.")
