"""What the page, the command line and the API call: patch one prompt pair with every method asked for."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.patching.attribution import (
    APPROXIMATIONS,
    DEFAULT_RELP_RULES,
    RELP_RULES,
    approximate_grids,
    chance_r,
    pearson,
)
from interpscope.patching.patching import (
    KINDS,
    Activations,
    Cell,
    changed,
    last_logits,
    narrow_unembedding,
    real_grids,
    record,
)
from interpscope.patching.paths import check_path, parse_component, patched_together, path_value
from interpscope.patching.prompts import METRIC_LABELS, Metric, PromptPair, make_metric, prompt_pair
from interpscope.patching.results import PatchingResult, PathPatchingResult
from interpscope.progress import Progress

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

METHODS = ("real", *APPROXIMATIONS)
MAX_PATCH_TOKENS = 128  # real patching runs (n_layers + 1) x T passes for the residual grid alone


def parse_list(value: str | Sequence[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated string or a list of names, checked against `allowed` (order kept, duplicates dropped)."""
    if value is None:
        return list(allowed)
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    items = [v for v in items if v]
    unknown = [v for v in items if v not in allowed]
    if unknown:
        raise InterpscopeError(f"Unknown {what} {', '.join(map(repr, unknown))}; choose from {', '.join(allowed)}.")
    if not items:
        raise InterpscopeError(f"Choose at least one {what[:-1] if what.endswith('s') else what}: "
                               f"{', '.join(allowed)}.")
    return list(dict.fromkeys(items))


def check_model(lm: LoadedModel, methods: Sequence[str]) -> None:
    """Patching needs a transformer (attention outputs and heads to patch); RelP needs the LRP rules' pieces."""
    capabilities = lm.adapter.capabilities()
    if "attention" not in capabilities or lm.adapter.attention_out_proj(0) is None:
        raise InterpscopeError(f"Activation patching here needs a transformer with attention heads; {lm.name} "
                               f"({lm.family}) has none.")
    if "relp" in methods and "transformer_lrp" not in capabilities:
        raise InterpscopeError(f"RelP needs the LRP rules, which {lm.name} ({lm.family}) does not support; run "
                               "--method real,atp.")


def _labels(pair: PromptPair, kind: str, n_layers: int, n_heads: int) -> tuple[list[str], list[str]]:
    if kind == "heads":
        return [f"L{layer}" for layer in range(n_layers)], [f"H{head}" for head in range(n_heads)]
    columns = [f"{i}: {c!r}" + ("" if c == k else f"→{k!r}")
               for i, (c, k) in enumerate(zip(pair.clean_tokens, pair.corrupt_tokens, strict=True))]
    rows = [f"L{layer}" for layer in range(n_layers)]
    return (rows + ["final"], columns) if kind == "resid" else (rows, columns)


@dataclass
class Prepared:
    """Both prompts run once: their tokens, activations, the metric and its clean and corrupt values."""

    pair: PromptPair
    clean: Activations
    corrupt: Activations
    metric: Metric
    clean_value: float
    corrupt_value: float
    sinks: list[dict]

    @property
    def span(self) -> float:
        return self.clean_value - self.corrupt_value

    def common(self, lm: LoadedModel) -> dict:
        """The fields every causal result shares."""
        pair, metric = self.pair, self.metric
        return dict(model=lm.name, clean_tokens=pair.clean_tokens, corrupt_tokens=pair.corrupt_tokens,
                    clean_ids=pair.clean_ids[0].tolist(), corrupt_ids=pair.corrupt_ids[0].tolist(),
                    metric=metric.kind, metric_label=metric.label, answer=metric.answer, answer_id=metric.answer_id,
                    wrong=metric.wrong, wrong_id=metric.wrong_id, clean_value=self.clean_value,
                    corrupt_value=self.corrupt_value, sinks=self.sinks, bos_prepended=pair.bos_prepended)


def prepare(lm: LoadedModel, clean: str, corrupt: str, metric: str, answer: str | int | None,
            wrong: str | int | None, prepend_bos: bool | None, heads: bool = True) -> Prepared:
    """Tokenise and check the pair, run both prompts, resolve the metric; refuse a metric equal on both prompts.
    The caller holds the model's lock."""
    from interpscope.relevance.api import model_kind
    from interpscope.relevance.sinks import report_from, watching
    from interpscope.sinks import words

    adapter = lm.adapter
    pair = prompt_pair(lm, clean, corrupt, prepend_bos)
    if pair.n_tokens > MAX_PATCH_TOKENS:
        raise InterpscopeError(f"The prompts are {pair.n_tokens} tokens; patching takes at most {MAX_PATCH_TOKENS} "
                               f"(each grid cell is a forward pass). Shorten them.")
    with watching(adapter) as seen:  # the sinks' middle residual off the clean pass
        clean_acts = record(adapter, pair.clean_ids, heads=heads)
    corrupt_acts = record(adapter, pair.corrupt_ids, heads=heads, keys_values=True)
    report = report_from(adapter, seen["residual"], 0 if pair.bos_prepended else None)
    chosen = make_metric(lm, metric, clean_acts.logits, corrupt_acts.logits, answer, wrong)
    with torch.no_grad(), narrow_unembedding(adapter, chosen) as read:  # read as the patched passes read it, so a
        # patch restoring the whole final residual gives the clean value bit for bit (a product over the two metric
        # tokens rounds differently from one over the whole vocabulary)
        clean_value, corrupt_value = (float(read.value(last_logits(adapter, ids))[0])
                                      for ids in (pair.clean_ids, pair.corrupt_ids))
    resolution = 16 * torch.finfo(lm.dtype).eps * max(1.0, abs(clean_value))  # what the model's dtype can tell apart
    if abs(clean_value - corrupt_value) <= resolution:
        raise InterpscopeError(f"The {METRIC_LABELS[metric]} is the same after both prompts ({clean_value:.4g}): "
                               "there is nothing to restore. Pick a corruption that changes the answer, or other "
                               "answer tokens.")
    return Prepared(pair, clean_acts, corrupt_acts, chosen, clean_value, corrupt_value,
                    report.rows(pair.clean_tokens, words(model_kind(adapter))["sink"]))


def patch(lm: LoadedModel, clean: str, corrupt: str, *, metric: str = "logit-diff", answer: str | int | None = None,
          wrong: str | int | None = None, components: str | Sequence[str] | None = None,
          methods: str | Sequence[str] | None = None, relp_rules: str = DEFAULT_RELP_RULES,
          prepend_bos: bool | None = None, progress: Progress | None = None, batch_size: int = 24) -> PatchingResult:
    """Patch the corrupt run with clean activations, cell by cell (real) and by AtP / RelP estimates."""
    kinds = parse_list(components, KINDS, "components")
    chosen = parse_list(methods, METHODS, "methods")
    if relp_rules not in RELP_RULES:
        raise InterpscopeError(f"Unknown RelP rules {relp_rules!r}; choose one of {', '.join(RELP_RULES)}.")
    check_model(lm, chosen)
    adapter = lm.adapter
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, metric, answer, wrong, prepend_bos, heads="heads" in kinds)
        pair, span = ready.pair, ready.span
        seconds["record"] = time.perf_counter() - started
        raw: dict[str, dict[str, np.ndarray]] = {kind: {} for kind in kinds}
        for method in chosen:
            start = time.perf_counter()
            if method == "real":
                grids = real_grids(adapter, pair.corrupt_ids, ready.metric, ready.clean, ready.corrupt, kinds,
                                   progress=progress, batch_size=batch_size)
                for kind in kinds:
                    raw[kind]["real"] = (grids[kind] - ready.corrupt_value) / span
            else:
                estimates = approximate_grids(lm.model, adapter, pair.corrupt_ids, ready.metric, ready.clean,
                                              ready.corrupt, kinds, method, relp_rules, pair.clean_ids)
                for kind in kinds:
                    raw[kind][method] = estimates[kind] / span
            seconds[method] = time.perf_counter() - start
        masks = {kind: changed(adapter, kind, ready.clean, ready.corrupt) for kind in kinds}
    for kind in kinds:  # a cell whose clean and corrupt activations are identical patches nothing: exactly 0, not
        for method in raw[kind]:  # the 1e-7 a batched forward pass leaves (the page and the CSV both say 0)
            raw[kind][method] = np.where(np.asarray(masks[kind], dtype=bool), raw[kind][method], 0.0)
    blocks, agreement = {}, {}
    for kind in kinds:
        rows, columns = _labels(pair, kind, adapter.n_layers, adapter.n_heads)
        blocks[kind] = {"rows": rows, "columns": columns, "changed": masks[kind], **raw[kind]}
        if "real" in chosen and any(m in chosen for m in APPROXIMATIONS):
            scores: dict[str, float | int | None] = {"cells": int(masks[kind].sum())}
            for method in APPROXIMATIONS:
                if method in chosen:
                    scores[method] = pearson(raw[kind][method], raw[kind]["real"], masks[kind])
            control = "relp" if "relp" in chosen else "atp"
            scores["chance_r95"] = chance_r(raw[kind]["real"], raw[kind][control], masks[kind])
            agreement[kind] = scores
    seconds["total"] = time.perf_counter() - started
    return PatchingResult(clean=clean, corrupt=corrupt, methods=chosen, components=kinds, grids=blocks,
                          relp_rules=relp_rules if "relp" in chosen else None, agreement=agreement, seconds=seconds,
                          **ready.common(lm))


def path_patch(lm: LoadedModel, clean: str, corrupt: str, sender: str, receiver: str, *, metric: str = "logit-diff",
               answer: str | int | None = None, wrong: str | int | None = None,
               prepend_bos: bool | None = None) -> PathPatchingResult:
    """Path patching sender -> receiver (interpscope.patching.paths), beside the sender's total effect (the sender
    patched with nothing frozen) as its control."""
    check_model(lm, ["real"])
    adapter = lm.adapter
    first, second = parse_component(sender, adapter), parse_component(receiver, adapter, receiver=True)
    check_path(first, second)
    started = time.perf_counter()
    with model_lock(lm):
        ready = prepare(lm, clean, corrupt, metric, answer, wrong, prepend_bos, heads=True)
        ids = ready.pair.corrupt_ids
        value = path_value(adapter, ids, ready.metric, ready.clean, ready.corrupt, first, second)
        kind = "heads" if first.kind == "head" else first.kind
        cells = [Cell(kind, first.layer, int(first.head or 0))] if first.kind == "head" else \
            [Cell(kind, first.layer, p) for p in range(ready.pair.n_tokens)]
        total = patched_together(adapter, ids, ready.metric, ready.clean, cells)
    span = ready.span
    return PathPatchingResult(clean=clean, corrupt=corrupt, sender=first.label, receiver=second.label,
                              path_effect=(value - ready.corrupt_value) / span, path_metric=value,
                              total_effect=(total - ready.corrupt_value) / span, total_metric=total,
                              seconds=time.perf_counter() - started, **ready.common(lm))
