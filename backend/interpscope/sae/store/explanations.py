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


SCORE_NAME = "lexical match score"
SCORE_DIFFERENCE = ("The lexical match score is the share of a feature's held-out contexts (where it fires and where "
                    "it never does, equally many) that its explanation's words classify right (balanced accuracy, 0.5 "
                    "= chance), from a handful of contexts; the SAE bench's detection AUROC is a different number: an "
                    "LM judge's ranking of contexts over a sample of features.")


def score_interval(entry: dict, z: float = 1.96) -> tuple[float, float] | None:
    """A 95% Wilson interval of an explanation's lexical match score over its positives + negatives (exact as a
    proportion when the two counts are equal, as they are unless the negative pool ran short; approximate
    otherwise). None without a score or counts (issue 45.14: a score of 1.00 from 10 + 10 contexts is not 1.00)."""
    score, n = entry.get("score"), int(entry.get("positives") or 0) + int(entry.get("negatives") or 0)
    if score is None or n == 0:
        return None
    centre = (score + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (score * (1 - score) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)


def score_text(entry: dict) -> str | None:
    """'lexical match score 1.00 [0.83, 1.00] on 10 + 10 held-out contexts' (None without a score)."""
    score = entry.get("score")
    if score is None:
        return None
    interval = score_interval(entry)
    shown = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    return (f"{SCORE_NAME} {score:.2f}{shown} on {entry.get('positives', 0)} + {entry.get('negatives', 0)} held-out "
            "contexts")
