"""A whole uploaded file explained row by row with one method, resumable and stoppable, then aggregated.

A run lives in a folder (default data_dir()/file_attribution/<key>, the key a hash of the file's content, model,
method, options and target): spec.json, then rows.jsonl, one line per finished row, flushed as each row ends. Run
it again with the same settings and it continues after the last finished row; with other settings it refuses,
naming them (or starts over with force, deleting only its own files). A row the model cannot take (too long, ...)
is recorded with its error and counted, never skipped silently.

Aggregates (attention sinks left out, like everywhere): mean relevance per token type (with counts), mean
relevance by distance from the predicted position (0 = the last token), and both per label when the file has a
label column. The tidy table has one row per (row, position): row, position, token, relevance, target, label, sink
and, for an excluded position, why (excluded_reason: 'prepended BOS', 'measured attention sink, 132x the median
norm'), as the relevance page names it; each row of rows.jsonl keeps those reasons under "excluded".
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.atomic import write_json
from interpscope.config import InterpscopeError, data_dir
from interpscope.outputs import OutputFolder, refuse_foreign_files
from interpscope.relevance.methods import METHODS, MethodOptions, get_method
from interpscope.results import Result
from interpscope.resume import appending, check_same_settings, read_log
from interpscope.uploads import UploadTable

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

SPEC_FILE = "spec.json"
ROWS_FILE = "rows.jsonl"
MAX_ROWS = 5000
OLD_ROW_REASON = "excluded (its reason was not recorded: a row written by an older version; run again with --force)"


def excluded_reasons(row: dict) -> dict[int, str]:
    """position -> why it is excluded, for one explained row of a file: 'prepended BOS', 'measured attention sink,
    132x the median norm' (what the relevance page says), from the row's "excluded" entries."""
    reasons = {int(e["position"]): str(e["reason"]) for e in row.get("excluded") or []}
    return {int(p): reasons.get(int(p), OLD_ROW_REASON) for p in row.get("sinks", [])}


@dataclass
class FileSpec:
    """Everything that determines a run's rows (a resume must match it)."""

    file_sha256: str
    n_rows: int
    model: str
    method: str
    options: dict
    token: str | None = None
    # the token every row runs after (interpscope.inputs.input_ids_for): a run made under another prefix holds other
    # maps, so it is a different run (a resume never mixes them)
    prefix_token_id: int | None = None


@dataclass
class FileAggregates(Result):
    """What the rows say together (attention sinks left out). Schema interpscope.file_aggregates: the CLI's
    `explain --all-rows` writes it as aggregates.json, the page exports it under both of its charts."""

    SCHEMA = "interpscope.file_aggregates"
    SCHEMA_VERSION = 1

    by_token: list[dict]
    by_distance: list[dict]
    by_label: dict[str, dict] = field(default_factory=dict)
    method: str | None = None  # the method's label (None in the per-label groups, which belong to one run)

    def tidy(self) -> list[dict]:
        """The mean relevance per token type (the main table)."""
        return [dict(row) for row in self.by_token]

    def figure(self, top: int = 25):
        """The page's mean relevance per token type (the `top` token types by |mean|)."""
        from interpscope.figures.relevance import mean_relevance_bars

        rows = self.by_token[:top]
        return mean_relevance_bars([r["token"] for r in rows], [r["mean_relevance"] for r in rows],
                                   [r["count"] for r in rows], f"Mean relevance per token type ({self.method})",
                                   f"token, by mean (top {top} by |mean|)", by_value=True)

    def distance_figure(self):
        """The page's mean relevance by distance from the predicted position (0 = the last token)."""
        from interpscope.figures.relevance import mean_relevance_bars

        return mean_relevance_bars([str(r["distance"]) for r in self.by_distance],
                                   [r["mean_relevance"] for r in self.by_distance],
                                   [r["count"] for r in self.by_distance],
                                   "Mean relevance by distance from the prediction", "tokens back (0 = last)")


@dataclass
class FileRun(Result):
    """The rows finished so far (in row order), the errors, and whether every row is done (schema
    interpscope.file_attribution: the page's whole-file export; the CLI keeps the same rows in its folder)."""

    SCHEMA = "interpscope.file_attribution"
    SCHEMA_VERSION = 1

    folder: str
    spec: FileSpec
    rows: list[dict]
    errors: list[dict]
    complete: bool
    seconds: float = 0.0

    def tidy(self) -> list[dict]:
        """One row per (file row, token position), naming the method (and model) that explained it, and why a
        position is excluded (empty where it is not)."""
        out = []
        for r in self.rows:
            reasons = excluded_reasons(r)
            out += [{"row": r["row"], "position": i, "token": token, "relevance": value, "target": r["target"],
                     "label": r.get("label"), "sink": i in r["sinks"], "excluded_reason": reasons.get(i, ""),
                     "method": self.spec.method, "model": self.spec.model}
                    for i, (token, value) in enumerate(zip(r["tokens"], r["relevance"], strict=True))]
        return out

    def aggregates(self, top: int = 50, max_distance: int = 64) -> FileAggregates:
        by_label = {}
        if any(r.get("label") is not None for r in self.rows):
            for label in sorted({str(r.get("label")) for r in self.rows}):
                chosen = [r for r in self.rows if str(r.get("label")) == label]
                group = asdict(aggregate(chosen, top, max_distance))
                group.pop("method")
                by_label[label] = group | {"rows": len(chosen)}
        overall = aggregate(self.rows, top, max_distance)
        overall.by_label = by_label
        method = METHODS.get(self.spec.method)
        overall.method = method.label if method is not None else self.spec.method
        return overall

    def figure(self):
        """The page's mean relevance per token type over the finished rows."""
        return self.aggregates().figure()


def aggregate(rows: list[dict], top: int = 50, max_distance: int = 64) -> FileAggregates:
    """Mean relevance per token type (the `top` with the largest |mean|, at least 2 occurrences first) and by
    distance from the predicted position, over rows' non-sink tokens."""
    per_token: dict[str, list[float]] = defaultdict(list)
    per_distance: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        n = len(row["tokens"])
        for i, (token, value) in enumerate(zip(row["tokens"], row["relevance"], strict=True)):
            if i in row["sinks"]:
                continue
            per_token[token].append(value)
            if n - 1 - i < max_distance:
                per_distance[n - 1 - i].append(value)
    tokens: list[dict[str, Any]] = [{"token": t, "mean_relevance": float(np.mean(v)), "count": len(v)}
                                    for t, v in per_token.items()]
    tokens.sort(key=lambda r: (r["count"] < 2, -abs(r["mean_relevance"])))
    distance = [{"distance": d, "mean_relevance": float(np.mean(per_distance[d])), "count": len(per_distance[d])}
                for d in sorted(per_distance)]
    return FileAggregates(by_token=tokens[:top], by_distance=distance)


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def default_folder(spec: FileSpec) -> Path:
    key = hashlib.sha1(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:16]
    return data_dir() / "file_attribution" / key


def explain_file(lm: LoadedModel, table: UploadTable, data: bytes, method: str, *, options: MethodOptions | None = None,
                 token: str | None = None, folder: str | Path | None = None, force: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> FileRun:
    """Explain every row of `table` (its file's bytes: `data`) for its predicted next token (or `token`), resuming
    a run with the same settings; `should_stop()` is asked between rows."""
    from interpscope.relevance.api import explain

    if len(table.examples) > MAX_ROWS:
        raise InterpscopeError(f"The file has {len(table.examples):,} rows; whole-file attribution takes up to "
                               f"{MAX_ROWS:,}. Split the file.")
    options = (options or MethodOptions()).checked()
    spec_method = get_method(method, lm.adapter)
    spec = FileSpec(file_sha256=file_sha256(data), n_rows=len(table.examples), model=lm.name, method=spec_method.name,
                    options=options.to_dict(), token=token, prefix_token_id=lm.prefix_token_id)
    out = Path(folder) if folder else default_folder(spec)
    refuse_foreign_files(out, (SPEC_FILE, ROWS_FILE))  # a person's rows.jsonl is not read as finished rows
    owned = OutputFolder.claim(out, force=force, command="explain --all-rows")
    saved = json.loads((out / SPEC_FILE).read_text(encoding="utf-8")) if (out / SPEC_FILE).is_file() else None
    if saved is not None and not check_same_settings(saved, asdict(spec), what="This file attribution run",
                                                     where="in the folder", force=force):
        owned.remove(out / ROWS_FILE)
    owned.record(SPEC_FILE, ROWS_FILE)  # before they are written: a kill in between leaves no file of ours unlisted
    if saved is None or saved != asdict(spec):
        write_json(out / SPEC_FILE, asdict(spec))
    done = read_log(out / ROWS_FILE)  # a torn last line is cut off, so the resume appends whole lines
    start = time.perf_counter()
    total = len(table.examples)
    with appending(out / ROWS_FILE) as append:
        for index in range(len(done), total):
            if should_stop is not None and should_stop():
                break
            label = table.labels[index] if table.labels else None
            try:
                result = explain(lm, table.examples[index], spec.method, token=token, options=options)
                entry = {"row": index, "tokens": result.tokens, "relevance": [float(v) for v in result.relevance],
                         "target": result.target.label, "value": result.logit, "sinks": result.sink_positions,
                         "excluded": result.sinks, "label": label, "seconds": result.seconds}
            except InterpscopeError as err:
                entry = {"row": index, "error": str(err), "label": label}
            append(entry)
            done.append(entry)
            if progress:
                progress(index + 1, total)
    rows = [r for r in done if "error" not in r]
    return FileRun(folder=str(out), spec=spec, rows=rows, errors=[r for r in done if "error" in r],
                   complete=len(done) == total, seconds=time.perf_counter() - start)
