"""What every page shares: the loaded model for the sidebar choice, text input (paste or upload), errors, inputs
kept in the URL, an explicit Run with progress and Stop, and results shared by every session."""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import streamlit as st

from interpscope.config import InterpscopeError
from interpscope.inputs import check_text
from interpscope.models import LoadedModel, load_model
from interpscope.models.registry import DEFAULT_MODEL
from interpscope.uploads import parse_table


def model_key() -> tuple[str, str, str]:
    state = st.session_state
    return (state.get("model_name") or DEFAULT_MODEL, state.get("device", "auto"), state.get("dtype", "float32"))


def current_model() -> LoadedModel | None:
    """The model chosen in the sidebar, from the process's one model cache (one copy per resolved location, device
    and dtype, shared by all sessions; interpscope.models.cache); None on error."""
    name, device, dtype = model_key()
    from interpscope.models import smollm2

    first = name == "smollm2-135m" and not smollm2.is_converted()
    message = f"Loading {name}" + (" (first use: converting the bundled GGUF once)…" if first else "…")
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


def _keeps() -> dict[str, Any]:
    import inspect

    return {"persist_state": "page"} if "persist_state" in inspect.signature(st.number_input).parameters else {}


# Keyword arguments for the widget of a page input that a view or a choice hides: its value stays while the widget is
# not drawn (another view of the page), instead of coming back at the default, or at a value the page set before the
# visitor changed it, when it is drawn again (a feature chosen before the Prompt view is still the feature in the
# Steering view, and in the URL). Streamlit's persist_state (page scope: gone on a page switch); on a Streamlit
# without it, nothing.
KEEP: dict[str, Any] = _keeps()


def text_source(key: str, label: str = "Text", default: str = "", height: int = 120) -> str | None:
    """A paste box, or an upload (.txt/.md one example per line, .csv text column, .jsonl "text") with a row
    pick. Returns checked text, or None after showing why the input can't be used. The pasted text's widget key
    is f"{key}-text" (pages keep it in their URL); an upload is not part of a link. Which file the text came from
    is noted for committed(): a replaced file clears the page's last Run instead of computing its first row."""
    st.session_state["_text-upload"] = None
    mode = st.radio("Input", ["Paste text", "Upload a file"], horizontal=True, key=f"{key}-mode",
                    label_visibility="collapsed", **KEEP)
    if mode == "Paste text":
        st.session_state.setdefault(f"{key}-text", default)
        text = st.text_area(label, height=height, key=f"{key}-text", **KEEP)
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
        st.session_state["_text-upload"] = upload.file_id
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
# What the URL holds is what the page shows: the inputs of its last Run (snapshot taken when Run was pressed, so an
# edit that waits for Run never reaches the link), plus where the visitor is (scope "nav": store, view, feature) and,
# after a Run, how its result is displayed (scope "view": a threshold, a clicked node). Pages without a Run show
# results of their current inputs, and their URL holds those.
SCOPES = ("run", "view", "nav")


def _number(x: float | None) -> str:
    """A bound or a value in a note: whole numbers with thousands separators (1,000,000), others as short as exact
    enough (0.5, 1e-06)."""
    if x is None:
        return ""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"


@dataclass(frozen=True)
class Param:
    """One page input kept in the URL: widget key, query-string name, default, and how to read it back.

    kind: int, float, str or bool; choices: allowed values (anything else in a URL is ignored); low/high: bounds (a
    link's number outside them is brought to the nearest one, and the page says so: in_range).
    scope: "run" (an input of the page's Run: in the URL as of the last Run), "view" (how a Run's result is shown:
    in the URL as it is, once there is a Run) or "nav" (where the visitor is: always in the URL as it is).
    A default of None means "chosen by the page" (e.g. a steering strength that follows the feature).
    """

    key: str
    url: str
    default: Any
    kind: type = str
    choices: Sequence | None = None
    low: float | None = None
    high: float | None = None
    max_length: int = 2000
    scope: str = "run"

    def parse(self, raw: str) -> Any:
        """The URL's value as this input's type, or None when it is not one this input accepts. A number outside
        low..high is returned as it is (in_range brings it in); an infinite float only where a bound can replace it."""
        try:
            if self.kind is bool:
                value: Any = {"1": True, "true": True, "0": False, "false": False}[raw.lower()]
            elif self.kind is int:
                value = int(raw)
            elif self.kind is float:
                value = float(raw)
                if math.isnan(value) or (math.isinf(value) and (self.low if value < 0 else self.high) is None):
                    return None
            else:
                value = raw if len(raw) <= self.max_length else None
        except (ValueError, KeyError):
            return None
        if value is None or (self.choices is not None and value not in self.choices):
            return None
        return value

    def in_range(self, value: Any) -> Any:
        """`value` brought into low..high (the nearest bound when outside), as this input's type."""
        if self.kind not in (int, float) or isinstance(value, bool):
            return value
        if self.low is not None and value < self.low:
            value = self.low
        if self.high is not None and value > self.high:
            value = self.high
        return self.kind(value)

    def range_text(self) -> str:
        """This input's range in words, for the note on a link's value outside it."""
        if self.low is not None and self.high is not None:
            return f"{_number(self.low)} to {_number(self.high)}"
        return f"at least {_number(self.low)}" if self.high is None else f"at most {_number(self.high)}"

    def format(self, value: Any) -> str | None:
        if self.kind is bool:
            return "1" if value else "0"
        if self.kind is float and isinstance(value, float):
            text = repr(value)  # exact: a link reproduces the very number
        else:
            text = str(value)
        return text if len(text) <= self.max_length else None


def url_is_new(page: str) -> bool:
    """Whether this run must take the page's inputs from the URL: the session's first visit to the page, or a
    navigation here from another page carrying parameters this session did not write (st.page_link with query
    parameters). A rerun of the page it is on never re-reads the URL: the URL is what the page wrote, and a rerun
    whose URL lags behind (a file upload racing the last write) must not act as a link."""
    state = st.session_state
    if not state.get(f"_url-read-{page}"):
        return True
    here = {k: st.query_params.get(k) for k in st.query_params}
    return state.get("_url-page") != page and bool(here) and here != state.get("_url-wrote")


SIDEBAR_PARAMS = {"model", "device", "dtype", "run"}  # read by app.py (the sidebar) and by committed()


def url_inputs(page: str, params: Sequence[Param]) -> None:
    """Before the widgets: when url_is_new(page), take each input from the URL (checked; a number outside the
    input's range is brought to its nearest bound with a note naming what was asked and what is used; a value the
    input cannot take, or a parameter the page does not have, is ignored with a note), then give every input
    without a value its default. Registers `params` as the
    page's inputs, for the snapshot a Run takes (committed)."""
    state = st.session_state
    state.pop("_text-upload", None)  # set again by this run's text_source
    state["_url-just-read"] = set()
    if url_is_new(page):
        state[f"_url-read-{page}"] = True
        ignored = []
        for param in params:
            raw = st.query_params.get(param.url)
            if raw is None:
                continue
            value = param.parse(raw)
            if value is None:
                ignored.append(param.url)
                continue
            used = param.in_range(value)
            if used != value:  # never changed silently: what was asked, its range, what is used instead
                st.warning(f"The link asks for {param.url}={raw}, outside its range ({param.range_text()}): using "
                           f"{_number(used)} instead.")
            state[param.key] = used
            state["_url-just-read"].add(param.key)
        known = {param.url for param in params} | SIDEBAR_PARAMS
        ignored += [name for name in st.query_params if name not in known]  # a typo, or another page's input
        if ignored:
            st.warning(f"Ignored link parameter(s) this page cannot use: {', '.join(ignored)}.")
        # a link with run=1 commits the inputs it carries: for the first Run the page reaches on this visit only
        state["_link-run"] = st.query_params.get("run") == "1"
    else:
        state.pop("_link-run", None)
    state["_url-page"] = page
    state["_url-params"] = list(params)
    for param in params:
        state.setdefault(param.key, param.default)


def bounded(key: str, low: int, high: int, what: str) -> None:
    """Bring the integer input `key` into low..high before its widget is drawn. A value a link gave (read from the
    URL on this run) that is out of range is named in a warning with what is shown instead: a link's request is
    never changed silently."""
    state = st.session_state
    value = state.get(key)
    if value is None:
        return
    fixed = int(min(max(int(value), low), high))
    if fixed == value:
        return
    if key in state.get("_url-just-read", ()):
        st.warning(f"The link asks for {what} {value}, which is not here ({what}s {low}–{high}): showing {fixed}.")
    state[key] = fixed


def resend(key: str) -> None:
    """Give a widget's value to the browser again on this run (before the widget is drawn). A value the page set
    (a default, a link's, one that follows the model) reaches the browser only on the run that set it; when a rerun
    interrupts that run before the browser drew the widget, the next run draws it at the widget's own default (a
    toggle comes up off) while the page believes the value it set, and the click after that sends the wrong one.
    Called by follow(), right before the widget it serves is drawn (a value the page chose, such as Prepend BOS's
    default for the model), never for widgets this run does not draw: with every toggle of the page resent on every
    run, the SAE browser's click on a feature in the Prompt view now and then never reached the URL."""
    state = st.session_state
    if state.get(key) is not None:
        state[key] = state[key]


def follow(key: str, owner: Any, default: Callable[[], Any]) -> None:
    """An input whose default depends on another (a steering strength on the feature): set it to default() when
    `owner` changed since it was last set, unless this run just read it from a link or it was given before the
    page first set it (then it stays, for `owner`)."""
    state, tag = st.session_state, f"_follows-{key}"
    if key in state.get("_url-just-read", ()) or (tag not in state and state.get(key) is not None):
        state[tag] = owner
    elif tag not in state or state[tag] != owner or state.get(key) is None:
        state[key] = default()
        state[tag] = owner
    else:
        resend(key)


def model_params() -> dict[str, str]:
    """The sidebar's model, device and dtype for a link, where they differ from the defaults (app.py reads them)."""
    name, device, dtype = model_key()
    out = {"model": name} if name != DEFAULT_MODEL else {}
    if device != "auto":
        out["device"] = device
    if dtype != "float32":
        out["dtype"] = dtype
    return out


def _values(params: Sequence[Param], scopes: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The current values of the inputs of these scopes that differ from their defaults, as link text."""
    values, too_long = {}, []
    for param in params:
        if param.scope not in scopes:
            continue
        value = st.session_state.get(param.key, param.default)
        if value == param.default or value is None:
            continue
        text = param.format(value)
        if text is None:
            too_long.append(param.url)
        else:
            values[param.url] = text
    return values, too_long


def write_url(params: Sequence[Param], run: str | None = None) -> list[str]:
    """After the widgets: the URL holds what the page shows (a reload or a shared link restores it). With `run` (a
    committed() key: the view shows that Run's result): the inputs of its last Run as they were when Run was
    pressed, and run=1, plus the current "view" inputs, or nothing but the "nav" inputs before a Run. Without: every
    input as it is. Returns the inputs too long for a link (they keep their default in a shared link)."""
    state = st.session_state
    if run is None:
        values, too_long = _values(params, SCOPES)
    else:
        values, too_long = _values(params, ("nav",))
        snapshot = state.get(f"_url-run-{run}")
        if state.get(f"_committed-{run}") is not None and snapshot is not None:
            shown, more = _values(params, ("view",))
            values = {**snapshot["values"], **values, **shown, "run": "1"}
            too_long = snapshot["too_long"] + more
        elif state.get("_link-run"):  # a link's run=1 waiting for the Run it commits: keep the link as it came
            values = {k: st.query_params.get(k) for k in st.query_params}
    values.update(model_params())
    if dict(st.query_params) != values:
        st.query_params.from_dict(values)
    state["_url-wrote"] = values
    return too_long


# --- expensive work: an explicit Run, a progress bar with an ETA, a Stop --------------------------------------
def committed(page: str, inputs: dict, submitted: bool) -> dict | None:
    """The inputs of the page's last Run (None before any): expensive work is done for these only, so changing a
    widget never starts it. Run commits the current inputs and takes the snapshot of the page's URL inputs that
    write_url(params, run=page) shows; a link with run=1 commits the inputs it carries (on the visit that opened
    it, for the first Run the page reaches: another view opened later waits for its Run); a Stop clears them, and so
    does a new uploaded file (its rows wait for a Run). Says so when the inputs changed since the last Run."""
    key, state = f"_committed-{page}", st.session_state
    if state.pop("_link-run", False):  # set by url_inputs on the visit that opened a link with run=1
        submitted = True
    if state.pop(f"_stop-{page}", False) or state.get(f"{page}-stop"):
        forget_run(page)
        # a passing note: the page's own box (what Run computes) is what stays, so a Stop never leaves two boxes
        st.toast("Stopped: the page keeps its inputs; press Run to start again.")
        return None
    upload = state.get("_text-upload")
    if submitted:
        state[key] = dict(inputs)
        state[f"_upload-{page}"] = upload
        values, too_long = _values(state.get("_url-params", []), ("run", "nav"))
        state[f"_url-run-{page}"] = {"values": values, "too_long": too_long}
    elif state.get(key) is not None and upload is not None and state.get(f"_upload-{page}") not in (None, upload):
        forget_run(page)
        st.info("A new file: press **Run** to compute its results.")
        return None
    last = state.get(key)
    if last is not None and last != inputs:
        st.caption("The inputs changed since the last Run: press **Run** to update the results below.")
    return last


def forget_run(page: str) -> None:
    """Clear a page's last Run (its inputs and its URL snapshot)."""
    for name in (f"_committed-{page}", f"_url-run-{page}", f"_upload-{page}"):
        st.session_state.pop(name, None)


def request_stop(page: str) -> None:
    """The Stop button's callback: the rerun its click starts interrupts the work, and committed(page) clears the
    page's Run instead of starting it again."""
    st.session_state[f"_stop-{page}"] = True


@contextmanager
def progress(label: str, page: str | None = None, first: str | None = None) -> Iterator[Callable[..., None]]:
    """The one progress bar of every page: a bar with an ETA and, with `page`, a Stop button beside it (pressing it
    ends the run at the next progress step and clears the page's Run). Bar and button live in one st.empty slot
    that is emptied when the block ends, whether the work finished, raised, or was stopped (a Stop reruns the
    script, which raises inside the block): nothing stays on screen after the work.

    The update takes the three shapes backend calls use (interpscope.progress): (done, total), (fraction, text) and
    (stage, done, total). `first`: what the bar says until the first update (e.g. "starting"), after the label;
    every update replaces it with its own stage."""
    slot = st.empty()
    row = slot.container()
    bar = row.progress(0.0, text=f"{label}: {first}" if first else label)
    if page is not None:
        row.button("Stop", key=f"{page}-stop", help="Stop this computation (the page keeps its inputs).",
                   on_click=request_stop, args=(page,))
    start = time.perf_counter()

    def update(*args) -> None:
        if len(args) == 3:  # (stage, done, total)
            stage, done, total = args
            fraction = min(max(done / total, 0.0), 1.0) if total else 1.0
            shown = f"{label}: {stage} {done:,} / {total:,}"
        elif isinstance(args[1], str):  # (fraction, text)
            fraction, shown = min(max(float(args[0]), 0.0), 1.0), f"{label}: {args[1]}"
        else:  # (done, total)
            done, total = args
            fraction = min(max(done / total, 0.0), 1.0) if total else 1.0
            shown = f"{label} {done:,} / {total:,}"
        elapsed = time.perf_counter() - start
        eta = f" · about {elapsed / fraction * (1 - fraction):.0f} s left" if 0 < fraction < 1 and elapsed > 1 else ""
        bar.progress(fraction, text=f"{shown}{eta}")

    try:
        yield update
    finally:
        slot.empty()


# --- results computed once per process, shared by every session -------------------------------------------------
_SHARED: OrderedDict[tuple, Any] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_GATES: dict[tuple, threading.Lock] = {}
SHARED_ENTRIES = 256


def clear_shared() -> None:
    """Forget every shared result (tests and benchmarks that need a cold start)."""
    with _SHARED_LOCK:
        _SHARED.clear()


def is_shared(name: str, key: tuple) -> bool:
    """Whether shared(name, key, ...) would return a result computed earlier (a header then says it is cached)."""
    with _SHARED_LOCK:
        return (name, *key) in _SHARED


def timing(seconds: float, cached: bool) -> str:
    """A result header's time: this run's, or, for a result computed earlier, that it is cached and what it took."""
    return f"cached (computed earlier in {seconds:.2f} s)" if cached else f"{seconds:.2f} s"


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
