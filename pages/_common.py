"""What every page shares: the loaded model for the sidebar choice, text input (paste or upload), errors, inputs
kept in the URL, an explicit Run with progress and Stop, and results shared by every session."""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import streamlit as st

from backend.config import InterpscopeError
from backend.inputs import check_text
from backend.uploads import parse_table
from backend.models import LoadedModel, load_model
from backend.models.registry import DEFAULT_MODEL


def model_key() -> tuple[str, str, str]:
    state = st.session_state
    return (state.get("model_name") or DEFAULT_MODEL, state.get("device", "auto"), state.get("dtype", "float32"))


def current_model() -> LoadedModel | None:
    """The model chosen in the sidebar, from the process's one model cache (one copy per resolved location, device
    and dtype, shared by all sessions; backend.models.cache); None on error."""
    name, device, dtype = model_key()
    from backend.models import smollm2

    first = name == "smollm2-135m" and not smollm2.is_converted()
    message = f"Loading {name}" + (" (first use: converting the bundled GGUF once, ~30 s)…" if first else "…")
    try:
        with st.spinner(message):
            return load_model(name, device=device, dtype=dtype)
    except InterpscopeError as err:
        st.error(f"Could not load model: {err}")
        return None


@contextmanager
def show_errors() -> Iterator[None]:
    """Turn errors meant for the user into a message in the page instead of a traceback."""
    try:
        yield
    except InterpscopeError as err:
        st.error(str(err))
        st.stop()


def text_source(key: str, label: str = "Text", default: str = "", height: int = 120) -> str | None:
    """A paste box, or an upload (.txt/.md one example per line, .csv text column, .jsonl "text") with a row
    pick. Returns checked text, or None after showing why the input can't be used. The pasted text's widget key
    is f"{key}-text" (pages keep it in their URL); an upload is not part of a link."""
    mode = st.radio("Input", ["Paste text", "Upload a file"], horizontal=True, key=f"{key}-mode",
                    label_visibility="collapsed")
    if mode == "Paste text":
        st.session_state.setdefault(f"{key}-text", default)
        text = st.text_area(label, height=height, key=f"{key}-text")
    else:
        upload = st.file_uploader("Upload .txt, .md, .csv (a text column) or .jsonl (a \"text\" field)",
                                  type=["txt", "md", "csv", "jsonl"], key=f"{key}-upload")
        if upload is None:
            st.info("Choose a file to upload; each line (or row) is one example.")
            return None
        try:
            table = parse_table(upload.getvalue(), upload.name)
        except InterpscopeError as err:
            st.error(str(err))
            return None
        examples = table.examples
        if table.note:
            st.caption(table.note)
        preview = [{"row": i, "text": t[:120] + ("…" if len(t) > 120 else "")} for i, t in enumerate(examples[:500])]
        st.dataframe(preview, hide_index=True, height=min(240, 38 + 35 * len(preview)))
        # one row box per uploaded file: a new file starts at row 0 in the box AND in what is explained
        row = st.number_input(f"Row (0–{len(examples) - 1})", min_value=0, max_value=len(examples) - 1, value=0,
                              key=f"{key}-row-{upload.file_id}")
        text = examples[int(row)]
    try:
        return check_text(text)
    except InterpscopeError as err:
        st.warning(str(err))
        return None


# --- a page's inputs live in its URL ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One page input kept in the URL: widget key, query-string name, default, and how to read it back.

    kind: int, float, str or bool; choices: allowed values (anything else in a URL is ignored); low/high: bounds.
    """

    key: str
    url: str
    default: Any
    kind: type = str
    choices: Sequence | None = None
    low: float | None = None
    high: float | None = None
    max_length: int = 2000

    def parse(self, raw: str) -> Any:
        """The URL's value as this input's type, or None when it is not one this input accepts."""
        try:
            if self.kind is bool:
                value: Any = {"1": True, "true": True, "0": False, "false": False}[raw.lower()]
            elif self.kind is int:
                value = int(raw)
            elif self.kind is float:
                value = float(raw)
                if not math.isfinite(value):
                    return None
            else:
                value = raw if len(raw) <= self.max_length else None
        except (ValueError, KeyError):
            return None
        if value is None or (self.choices is not None and value not in self.choices):
            return None
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return None
        return value

    def format(self, value: Any) -> str | None:
        if self.kind is bool:
            return "1" if value else "0"
        text = str(value)
        return text if len(text) <= self.max_length else None


def url_inputs(page: str, params: Sequence[Param]) -> None:
    """Before the widgets: on a session's first visit to the page, or when the URL carries parameters this session
    did not write (a link inside the app), take each input from the URL (checked; a value the input cannot take is
    ignored with a note), then give every input without a value its default."""
    flag = f"_url-read-{page}"
    here = {k: st.query_params.get(k) for k in st.query_params}
    if not st.session_state.get(flag) or (here and here != st.session_state.get("_url-wrote")):
        # a first visit, or a link inside the app (st.page_link with query parameters) to a page visited before
        st.session_state[flag] = True
        ignored = []
        for param in params:
            raw = st.query_params.get(param.url)
            if raw is None:
                continue
            value = param.parse(raw)
            if value is None:
                ignored.append(param.url)
            else:
                st.session_state[param.key] = value
        if ignored:
            st.warning(f"Ignored link parameter(s) this page cannot use: {', '.join(ignored)}.")
        # a link with run=1 commits the inputs it carries: for the first Run the page reaches on this visit only
        st.session_state["_link-run"] = st.query_params.get("run") == "1"
    else:
        st.session_state.pop("_link-run", None)
    for param in params:
        st.session_state.setdefault(param.key, param.default)


def model_params() -> dict[str, str]:
    """The sidebar's model, device and dtype for a link, where they differ from the defaults (app.py reads them)."""
    name, device, dtype = model_key()
    out = {"model": name} if name != DEFAULT_MODEL else {}
    if device != "auto":
        out["device"] = device
    if dtype != "float32":
        out["dtype"] = dtype
    return out


def write_url(params: Sequence[Param], extra: dict[str, str] | None = None) -> list[str]:
    """After the widgets: the URL holds every input that differs from its default (so a reload or a shared link
    restores the view). Returns the inputs too long for a link (they keep their default in a shared link)."""
    values, too_long = {}, []
    for param in params:
        value = st.session_state.get(param.key, param.default)
        if value == param.default:
            continue
        text = param.format(value)
        if text is None:
            too_long.append(param.url)
        else:
            values[param.url] = text
    values.update(extra or {})
    values.update(model_params())
    if dict(st.query_params) != values:
        st.query_params.from_dict(values)
    st.session_state["_url-wrote"] = values
    return too_long


# --- expensive work: an explicit Run, a progress bar with an ETA, a Stop --------------------------------------
def committed(page: str, inputs: dict, submitted: bool) -> dict | None:
    """The inputs of the page's last Run (None before any): expensive work is done for these only, so changing a
    widget never starts it. Run commits the current inputs; a link with run=1 commits the inputs it carries (on the
    visit that opened it, for the first Run the page reaches: another view opened later waits for its Run); a Stop
    clears them. Says so when the inputs changed since the last Run."""
    key = f"_committed-{page}"
    if st.session_state.pop("_link-run", False):  # set by url_inputs on the visit that opened a link with run=1
        submitted = True
    if st.session_state.get(f"{page}-stop"):
        st.session_state.pop(key, None)
        st.info("Stopped. Press Run to start again.")
        return None
    if submitted:
        st.session_state[key] = dict(inputs)
    last = st.session_state.get(key)
    if last is not None and last != inputs:
        st.caption("The inputs changed since the last Run: press **Run** to update the results below.")
    return last


def run_flag(page: str | None) -> dict[str, str]:
    """{"run": "1"} for write_url while `page` (a committed() key) shows a Run's results, or while a link's run=1
    waits for it: a shared link then reproduces the results."""
    if page is None:
        return {}
    waiting = bool(st.session_state.get("_link-run"))
    return {"run": "1"} if waiting or st.session_state.get(f"_committed-{page}") is not None else {}


@contextmanager
def progress(label: str, page: str | None = None) -> Iterator[Callable[[int, int], None]]:
    """A progress bar with an ETA for a long computation, removed when it ends; with `page`, a Stop button beside
    it (pressing it ends the run at the next progress step and clears the page's Run)."""
    row = st.container()
    bar = row.progress(0.0, text=label)
    if page is not None:
        row.button("Stop", key=f"{page}-stop", help="Stop this computation (the page keeps its inputs).")
    start = time.perf_counter()

    def update(done, total) -> None:
        """Counting calls: (done, total); staged calls: (fraction, text) (backend.progress names both)."""
        if isinstance(total, str):
            fraction, shown = min(max(float(done), 0.0), 1.0), f"{label}: {total}"
        else:
            fraction = min(max(done / total, 0.0), 1.0) if total else 1.0
            shown = f"{label} {done:,} / {total:,}"
        elapsed = time.perf_counter() - start
        eta = f" · about {elapsed / fraction * (1 - fraction):.0f} s left" if 0 < fraction < 1 and elapsed > 1 else ""
        bar.progress(fraction, text=f"{shown}{eta}")

    try:
        yield update
    finally:
        row.empty()


# --- results computed once per process, shared by every session -------------------------------------------------
_SHARED: "OrderedDict[tuple, Any]" = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_GATES: dict[tuple, threading.Lock] = {}
SHARED_ENTRIES = 256


def clear_shared() -> None:
    """Forget every shared result (tests and benchmarks that need a cold start)."""
    with _SHARED_LOCK:
        _SHARED.clear()


def shared(name: str, key: tuple, compute: Callable[[], Any]) -> Any:
    """The result of compute() for (name, key), computed once per process and shared by every session (least
    recently used out after SHARED_ENTRIES). Backend hooks are scoped to their run, so a result computed here is
    never an edited run's output unless the edit is part of the key. Errors are not cached."""
    full = (name, *key)
    with _SHARED_LOCK:
        if full in _SHARED:
            _SHARED.move_to_end(full)
            return _SHARED[full]
        gate = _SHARED_GATES.setdefault(full, threading.Lock())
    with gate:
        with _SHARED_LOCK:
            if full in _SHARED:
                return _SHARED[full]
        value = compute()
        with _SHARED_LOCK:
            _SHARED[full] = value
            _SHARED_GATES.pop(full, None)
            while len(_SHARED) > SHARED_ENTRIES:
                _SHARED.popitem(last=False)
        return value
