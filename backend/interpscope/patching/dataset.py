"""Patching over a set of prompt pairs (issue 45.15): the dataset-level figure of the AtP and RelP papers.

One pair's grid says what matters for that sentence; a claim about a task ("layer 9's residual at the second name
carries the answer") needs the grids of many pairs of one template averaged cell by cell, with their spread. Every
pair is patched as `interpscope patching` patches one (interpscope.patching.run.patch: real patching, AtP, RelP), all
with the same metric kind; the pairs must have the same number of tokens so positions line up (the pairs of one
template). Per component kind and method: the mean grid, the standard deviation over pairs and the number of pairs; a
cell no pair's patch changes stays exactly 0. Agreement is Pearson r between an estimate's mean grid and real
patching's mean grid over the cells any pair changes (the papers' figure), beside the per-pair r (mean, min, max).
Excluded positions (a prepended BOS, measured sinks) of any pair are never ranked.

Schema interpscope.patching_set: `interpscope patching --pairs FILE --json`, the Patching page's "Over a set of pairs"
export and `interpscope.patch_set(...).to_dict()`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from interpscope.config import InterpscopeError
from interpscope.patching.attribution import DEFAULT_RELP_RULES, pearson
from interpscope.patching.results import KIND_LABELS, best_cell
from interpscope.progress import Progress
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MAX_PAIRS = 200
ESTIMATES = ("atp", "relp")


@dataclass
class PatchingSetResult(Result):
    """Mean and spread of patching grids over prompt pairs of one template (see the module docstring)."""

    SCHEMA = "interpscope.patching_set"
    SCHEMA_VERSION = 1

    model: str
    metric: str
    metric_label: str
    methods: list[str]
    components: list[str]
    pairs: list[dict]
    tokens: list[str]
    grids: dict[str, dict[str, Any]]
    agreement: dict[str, dict[str, Any]] = field(default_factory=dict)
    excluded: list[int] = field(default_factory=list)
    relp_rules: str | None = None
    seconds: float = 0.0

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    def mean(self, kind: str, method: str) -> np.ndarray:
        return np.asarray(self.grids[kind][method]["mean"], dtype=float)

    def std(self, kind: str, method: str) -> np.ndarray:
        return np.asarray(self.grids[kind][method]["std"], dtype=float)

    def column_label(self, column: int) -> str:
        """'10: ' John'' where every pair has that token there, else '10: (varies)'."""
        words = {pair["clean_tokens"][column] for pair in self.pairs}
        return f"{column}: {next(iter(words))!r}" if len(words) == 1 else f"{column}: (varies)"

    def best(self, kind: str, method: str = "real") -> tuple[int, int, float, float] | None:
        """(row, column, mean, std) of the cell whose mean restores most, excluded positions never ranked."""
        if kind not in self.grids or method not in self.grids[kind]:
            return None
        found = best_cell(self.mean(kind, method), kind, self.excluded)
        if found is None:
            return None
        row, column, value = found
        return row, column, value, float(self.std(kind, method)[row, column])

    def summary(self) -> list[str]:
        """One sentence per component kind from the mean grids: the cell restoring most on average, its spread over
        the pairs, and how well each estimate's mean grid tracks real patching's (beside the per-pair r)."""
        method = "real" if "real" in self.methods else self.methods[0]
        out = []
        for kind in self.components:
            best = self.best(kind, method)
            if best is None:
                continue
            row, column, mean, std = best
            where = (f"head L{row}.H{column}" if kind == "heads"
                     else f"layer {row}, position {self.column_label(column)}")
            text = (f"{KIND_LABELS[kind]}: over {self.n_pairs} pairs, patching {where} restores {mean:.0%} ± "
                    f"{std:.0%} (mean ± sd over pairs) of the way to the clean {self.metric_label}"
                    + ("" if method == "real" else f" ({method} estimate)"))
            scores = self.agreement.get(kind, {})
            parts = []
            for name in ESTIMATES:
                entry = scores.get(name)
                if entry is None:
                    continue
                per = entry.get("per_pair")
                spread = (f" (per pair {np.mean(per):.2f}, {min(per):.2f} to {max(per):.2f})"
                          if per else "")
                parts.append(f"{name} r = {entry['mean_grid_r']:.2f} on the mean grid{spread}")
            out.append(text + (f"; against real patching {', '.join(parts)} over {scores['cells']} cells"
                               if parts else "") + ".")
        return out

    def payload(self) -> dict[str, Any]:
        from interpscope.results import to_plain

        plain = to_plain(self)
        plain["summary"] = self.summary()
        return plain

    def tidy(self) -> list[dict]:
        """One row per (component, row, column): each method's mean and sd over the pairs, and the pair count."""
        rows = []
        for kind in self.components:
            block = self.grids[kind]
            changed = np.asarray(block["changed_in"])
            means = {method: self.mean(kind, method) for method in self.methods}
            sds = {method: self.std(kind, method) for method in self.methods}
            for r, row_label in enumerate(block["rows"]):
                for c, column_label in enumerate(block["columns"]):
                    entry: dict[str, Any] = {"component": kind, "row": row_label, "column": column_label,
                                             "changed_in": int(changed[r, c]), "pairs": self.n_pairs}
                    for method in self.methods:
                        entry[f"{method}_mean"] = float(means[method][r, c])
                        entry[f"{method}_sd"] = float(sds[method][r, c])
                    rows.append(entry)
        return rows

    def figure(self):
        """Mean grids (one row per component kind, one column per method), sd over pairs in each cell's hover."""
        from interpscope.figures.patching_set import set_figure

        return set_figure(self)


def read_pairs(data: bytes, name: str = "pairs") -> list[dict]:
    """Pairs from a .jsonl (one object per line) or .csv file with columns clean, corrupt and optionally answer and
    wrong; a clear refusal for anything else (checked before any model runs)."""
    rows = _rows(data, name)
    if not rows:
        raise InterpscopeError(f"{name} holds no pairs.")
    pairs = []
    for number, row in enumerate(rows, start=1):
        missing = [key for key in ("clean", "corrupt") if not str(row.get(key) or "").strip()]
        if missing:
            raise InterpscopeError(f"{name}, pair {number}: no {' or '.join(missing)} text (each pair needs clean and "
                                   "corrupt; answer and wrong are optional).")
        pair = {"clean": str(row["clean"]), "corrupt": str(row["corrupt"])}
        for key in ("answer", "wrong"):
            value = row.get(key)
            if value is not None and str(value) != "":
                pair[key] = str(value)
        pairs.append(pair)
    if len(pairs) > MAX_PAIRS:
        raise InterpscopeError(f"{name} holds {len(pairs)} pairs; at most {MAX_PAIRS} run at once.")
    return pairs


def _rows(data: bytes, name: str) -> list[dict]:
    import csv
    import io

    from interpscope.inputs import decode_bytes

    text = decode_bytes(data, name=name)
    suffix = name.lower().rsplit(".", 1)[-1] if "." in name else ""
    if suffix == "csv":
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if header is None:
            return []
        header = [h.strip().lower() for h in header]
        rows = []
        for line, values in enumerate(reader, start=2):
            if not any(v.strip() for v in values):
                continue
            if len(values) != len(header):
                raise InterpscopeError(f"{name}, line {line}: {len(values)} fields where the header has "
                                       f"{len(header)}.")
            rows.append(dict(zip(header, values, strict=True)))
        return rows
    if suffix == "jsonl":
        rows = []
        for line, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (ValueError, RecursionError):
                raise InterpscopeError(f"{name}, line {line}: not one JSON object.") from None
            if not isinstance(value, dict) or any(isinstance(v, (dict, list)) for v in value.values()):
                raise InterpscopeError(f"{name}, line {line}: each line must be a flat JSON object "
                                       '({"clean": ..., "corrupt": ..., "answer": ..., "wrong": ...}).')
            rows.append(value)
        return rows
    raise InterpscopeError(f"{name}: pairs come as .jsonl (one object per line) or .csv (columns clean, corrupt, "
                           "optional answer, wrong).")


def shipped_pairs(name: str = "ioi") -> list[dict]:
    """The shipped pair sets (assets/prompts/pairs-<name>.jsonl): 'ioi' (six pairs of one IOI template)."""
    from interpscope.config import ASSETS_DIR

    path = Path(ASSETS_DIR) / "prompts" / f"pairs-{name}.jsonl"
    if not path.is_file():
        raise InterpscopeError(f"No shipped pair set {name!r} ({path} is missing).")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def patch_set(lm: LoadedModel, pairs: Sequence[dict], *, metric: str = "logit-diff",
              components: str | Sequence[str] | None = None, methods: str | Sequence[str] | None = None,
              relp_rules: str = DEFAULT_RELP_RULES, prepend_bos: bool | None = None,
              progress: Progress | None = None) -> PatchingSetResult:
    """Patch every pair (each with its own answer / wrong tokens, default its prompts' top predictions) and
    aggregate the grids; progress(done, total) counts pairs."""
    import time

    from interpscope.patching.prompts import prompt_pair
    from interpscope.patching.run import KINDS, METHODS, parse_list, patch

    if not pairs:
        raise InterpscopeError("Give at least one clean / corrupt pair.")
    if len(pairs) > MAX_PAIRS:
        raise InterpscopeError(f"{len(pairs)} pairs; at most {MAX_PAIRS} run at once.")
    kinds = parse_list(components, KINDS, "components")
    chosen = parse_list(methods, METHODS, "methods")
    lengths = [prompt_pair(lm, p["clean"], p["corrupt"], prepend_bos).n_tokens for p in pairs]  # refuse before any run
    odd = [i + 1 for i, n in enumerate(lengths) if n != lengths[0]]
    if odd:
        raise InterpscopeError(f"The pairs must have the same number of tokens so that positions line up (pairs of "
                               f"one template): pair 1 has {lengths[0]}, pair(s) {', '.join(map(str, odd[:10]))} "
                               f"differ ({', '.join(str(lengths[i - 1]) for i in odd[:10])}).")
    started = time.perf_counter()
    results = []
    for index, pair in enumerate(pairs):
        results.append(patch(lm, pair["clean"], pair["corrupt"], metric=metric, answer=pair.get("answer"),
                             wrong=pair.get("wrong"), components=kinds, methods=chosen, relp_rules=relp_rules,
                             prepend_bos=prepend_bos))
        if progress is not None:
            progress(index + 1, len(pairs))
    first = results[0]
    grids: dict[str, dict[str, Any]] = {}
    agreement: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        masks = np.stack([np.asarray(r.grids[kind]["changed"], dtype=bool) for r in results])
        block: dict[str, Any] = {"rows": first.grids[kind]["rows"],
                                 "columns": [str(c) for c in range(len(first.grids[kind]["columns"]))]
                                 if kind != "heads" else first.grids[kind]["columns"],
                                 "changed_in": masks.sum(axis=0)}
        for method in chosen:
            stack = np.stack([r.grid(kind, method) for r in results])
            block[method] = {"mean": stack.mean(axis=0),
                             "std": stack.std(axis=0, ddof=1) if len(results) > 1 else np.zeros(stack.shape[1:])}
        grids[kind] = block
        if "real" in chosen and any(m in chosen for m in ESTIMATES):
            anywhere = np.asarray(masks.any(axis=0), dtype=bool)
            scores: dict[str, Any] = {"cells": int(anywhere.sum())}
            for method in ESTIMATES:
                if method in chosen:
                    per = [r.agreement.get(kind, {}).get(method) for r in results]
                    scores[method] = {"mean_grid_r": pearson(block[method]["mean"], block["real"]["mean"], anywhere),
                                      "per_pair": [float(v) for v in per if v is not None]}
            agreement[kind] = scores
    excluded = sorted({p for r in results for p in r.excluded})
    from interpscope.patching.prompts import METRIC_LABELS

    same = len({r.metric_label for r in results}) == 1  # each pair has its own answer: name the metric, not pair 1's
    return PatchingSetResult(
        model=lm.name, metric=first.metric, metric_label=first.metric_label if same else METRIC_LABELS[first.metric],
        methods=chosen, components=kinds,
        pairs=[{"clean": r.clean, "corrupt": r.corrupt, "answer": r.answer, "wrong": r.wrong,
                "clean_tokens": r.clean_tokens, "corrupt_tokens": r.corrupt_tokens, "clean_value": r.clean_value,
                "corrupt_value": r.corrupt_value,
                "differing": [i for i, (a, b) in enumerate(zip(r.clean_ids, r.corrupt_ids, strict=True)) if a != b]}
               for r in results],
        tokens=list(first.clean_tokens), grids=grids, agreement=agreement, excluded=excluded,
        relp_rules=relp_rules if "relp" in chosen else None, seconds=time.perf_counter() - started)
