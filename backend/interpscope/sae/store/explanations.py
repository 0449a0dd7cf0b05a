"""Reading a store's explanations file (written by `interpscope sae explain`, interpscope.sae.store.explain)."""
from __future__ import annotations

import json
from pathlib import Path

EXPLANATIONS_FILE = "explanations.jsonl"


def read_explanations(folder: str | Path) -> dict[int, dict]:
    """{feature: {"explanation", "score", ...}} from the store's explanations.jsonl (one JSON object per line; a
    torn last line from an interrupted run is skipped)."""
    path = Path(folder) / EXPLANATIONS_FILE
    found: dict[int, dict] = {}
    if not path.is_file():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("feature"), int):
            found[entry["feature"]] = entry
    return found
