"""An uploaded file of examples as a table: the texts, an optional label per text, and what was chosen and why.

.txt/.md: one example per non-empty line. .csv: one per row of the text column (named, else 'text', else the first
column of strings, and the note says so), with a label column when one is named or one called label / class /
category / target exists. .jsonl: each line's "text" field, and its "label" field when every line has one. Rows with
an empty text are dropped and the note counts them: nothing the user gave is left out silently.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass

from interpscope.config import InterpscopeError
from interpscope.inputs import decode_bytes

LABEL_COLUMNS = ("label", "labels", "class", "category", "target")


@dataclass
class UploadTable:
    examples: list[str]
    labels: list[str] | None
    text_column: str | None
    label_column: str | None
    note: str = ""


def _ragged_row(text: str, filename: str) -> None:
    """Refuse a row with more or fewer fields than the header, naming its line: pandas would silently re-align it
    (a first row with one field too many turns the first column into the index and shifts every text by one
    column; a short row gets empty fields), so the texts explained would not be the ones in the file."""
    import csv

    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            return
        for row in reader:
            if any(field.strip() for field in row) and len(row) != len(header):  # a blank line is no row
                raise InterpscopeError(
                    f"{filename} line {reader.line_num} has {len(row)} field(s) where the header has {len(header)}; "
                    "quote a text that holds a comma (\"like, this\") and give every row the same columns.")
    except csv.Error as err:
        raise InterpscopeError(f"{filename} is not a readable CSV file: line {reader.line_num}: {err}.") from None


def _csv(text: str, filename: str, text_column: str | None, label_column: str | None) -> UploadTable:
    import pandas as pd

    _ragged_row(text, filename)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except Exception as err:  # noqa: BLE001 - pandas raises many parser error types
        raise InterpscopeError(f"{filename} is not a readable CSV file: {err}") from None
    names = [str(c) for c in frame.columns]
    notes = []
    if text_column is not None and text_column not in names:
        raise InterpscopeError(f"{filename} has no column {text_column!r} (columns: {', '.join(names)}).")
    column = text_column or ("text" if "text" in names else None)
    if column is None:
        wordy = [c for c in names if frame[c].str.contains(r"[A-Za-z]", regex=True).any()]
        if not wordy:
            raise InterpscopeError(f"{filename} has no text column (columns: {', '.join(names)}).")
        column = wordy[0]
        notes.append(f"No column named 'text': using the first text column, {column!r} (columns: {', '.join(names)}).")
    if label_column is not None and label_column not in names:
        raise InterpscopeError(f"{filename} has no label column {label_column!r} (columns: {', '.join(names)}).")
    label = label_column or next((c for c in names if c.lower() in LABEL_COLUMNS and c != column), None)
    keep = frame[column].str.strip() != ""
    dropped = int((~keep).sum())
    if dropped:
        notes.append(f"{dropped} row(s) with an empty {column!r} left out.")
    if label and label_column is None:
        notes.append(f"Label column: {label!r}.")
    labels = frame.loc[keep, label].tolist() if label else None
    return UploadTable(frame.loc[keep, column].tolist(), labels, column, label, " ".join(notes))


def _jsonl(text: str, filename: str) -> UploadTable:
    examples, labels, skipped = [], [], 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise InterpscopeError(f"{filename} line {n} is not valid JSON.") from None
        except RecursionError:  # a line of thousands of nested brackets: no record of ours looks like that
            raise InterpscopeError(f"{filename} line {n} is nested too deeply to be a record "
                                   '({"text": ..., "label": ...}).') from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InterpscopeError(f'{filename} line {n} has no string field "text".')
        if not record["text"].strip():
            skipped += 1
            continue
        examples.append(record["text"])
        labels.append(record.get("label"))
    has_labels = bool(labels) and all(v is not None for v in labels)
    note = f"{skipped} record(s) with an empty text left out." if skipped else ""
    return UploadTable(examples, [str(v) for v in labels] if has_labels else None, "text",
                       "label" if has_labels else None, note)


def parse_examples(data: bytes, filename: str, text_column: str | None = None) -> list[str]:
    """Examples from an upload (see parse_table): one per line, CSV row or JSONL record."""
    return parse_table(data, filename, text_column=text_column).examples


def parse_table(data: bytes, filename: str, text_column: str | None = None,
                label_column: str | None = None) -> UploadTable:
    """The examples (and labels) of an uploaded .txt/.md/.csv/.jsonl file; clear errors for anything else."""
    text = decode_bytes(data, name=filename)
    suffix = filename.lower().rsplit(".", 1)[-1] if "." in filename else "txt"
    if suffix == "csv":
        table = _csv(text, filename, text_column, label_column)
    elif suffix == "jsonl":
        table = _jsonl(text, filename)
    elif suffix in ("txt", "md", "text"):
        table = UploadTable([line for line in text.splitlines() if line.strip()], None, None, None)
    else:
        raise InterpscopeError(f"{filename}: unsupported file type .{suffix}; use .txt, .md, .csv or .jsonl.")
    if not table.examples:
        raise InterpscopeError(f"{filename} contains no examples.")
    return table
