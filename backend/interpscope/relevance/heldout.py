"""Faithfulness on held-out text: every relevance method on a shipped set of prompts nobody here tuned against.

The set (assets/prompts/heldout-v1.jsonl, built by scripts/build_heldout_prompts.py) holds prompts of several
categories, each with its expected next token (one token of the bundled tokenizer) and whether the bundled model's
top-1 is that token. Each prompt is explained for its expected token by every method; each map's MoRF / LeRF
curves are run under every deletion baseline (zero, pad, mean embedding), IG and occlusion computing their maps
from the same baseline the deletion uses. Each prompt runs as every view runs it (interpscope.inputs.input_ids_for:
the model's measured prefix token first where it has one); a prepended prefix stays in place in every curve, as
in `explain --faithfulness`. A random ordering per prompt (seeded) is the chance level. With the
position 0 and any measured sink (a massive-activation row, interpscope.sinks) kept in place the curves run again
under the first baseline. AttnLRP's softmax share (the conservation readout) is kept per prompt, so its link to ABPC
can be read. Each row keeps its excluded positions ("sinks") and why each is excluded ("excluded": position, token,
reason, ratio, as the relevance page and whole-file rows name them).
Results: per-prompt rows and a table of mean ABPC with seeded bootstrap 95% intervals
(interpscope.relevance.heldout_stats).
"""
from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.inputs import input_ids_for
from interpscope.progress import Progress
from interpscope.relevance import heldout_stats as stats
from interpscope.relevance.baselines import BASELINES, baseline_embeds
from interpscope.relevance.faithfulness import DEFAULT_STEPS, curves_for_maps
from interpscope.relevance.methods import METHODS, MethodOptions, get_method, methods_for, methods_taking
from interpscope.relevance.sinks import sink_report
from interpscope.relevance.targets import Target
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PROMPTS_DIR = ASSETS_DIR / "prompts"
SETS = {"heldout": "heldout-v1.jsonl"}
FIELDS = ("id", "category", "text", "expected")
DEFAULT_IG_STEPS = 8


def matched_methods() -> list[str]:
    """The methods whose map depends on the baseline (those taking the baseline option): each is computed from the
    deletion's baseline."""
    return [m.name for m in methods_taking("baseline")]


def softmax_pair(methods: Sequence[str]) -> tuple[str | None, str | None]:
    """The two methods the study's softmax diagnosis compares, as the registry declares them: the one that sends
    relevance through the attention softmaxes (AttnLRP) and the conserving rule set that does not (CP-LRP); None for
    one not among `methods`."""
    through = next((m for m in methods if METHODS[m].through_softmax), None)
    conserving = next((m for m in methods if METHODS[m].conserves and not METHODS[m].through_softmax), None)
    return through, conserving


def set_path(name: str) -> Path:
    """The file of a shipped prompt set ('heldout' or a file name in assets/prompts)."""
    path = PROMPTS_DIR / SETS.get(name, name)
    if not path.is_file():
        raise InterpscopeError(f"Unknown prompt set {name!r}: choose one of {', '.join(SETS)}.")
    return path


def load_set(name: str = "heldout") -> list[dict]:
    """The prompts of a shipped set, one dict per row (id, category, text, expected, and the model's check)."""
    rows = [json.loads(line) for line in set_path(name).read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise InterpscopeError(f"Row {row.get('id', '?')} of {name} lacks {', '.join(missing)}.")
    return rows


def choose(rows: Sequence[dict], limit: int | None = None, confident: bool = False,
           categories: Sequence[str] | None = None) -> list[dict]:
    """A subset: only the model-correct rows, only some categories; taken from every category in turn (so the
    first `limit`, or a run cut short, still covers every category)."""
    kept = [r for r in rows if (not confident or r.get("model_correct")) and
            (not categories or r["category"] in categories)]
    limit = len(kept) if limit is None else min(limit, len(kept))
    by: dict[str, list[dict]] = {}
    for row in kept:
        by.setdefault(row["category"], []).append(row)
    out: list[dict] = []
    depth = 0
    while len(out) < limit:
        for group in by.values():
            if depth < len(group) and len(out) < limit:
                out.append(group[depth])
        depth += 1
    return out


def accuracy(rows: Sequence[dict]) -> dict[str, dict]:
    """Top-1 accuracy on the expected tokens (rows' model_correct), per category and overall."""
    out: dict[str, dict] = {}
    for key in [*dict.fromkeys(r["category"] for r in rows), "all"]:
        group = [r for r in rows if key == "all" or r["category"] == key]
        correct = sum(bool(r.get("model_correct")) for r in group)
        out[key] = {"n": len(group), "correct": correct, "accuracy": correct / len(group) if group else None}
    return out


@dataclass
class HeldoutSettings:
    methods: list[str]
    baselines: list[str]
    ig_steps: int = DEFAULT_IG_STEPS
    curve_steps: int = DEFAULT_STEPS
    seed: int = 0
    bootstrap: int = stats.BOOTSTRAP
    target: str = "the expected next token's logit"
    removal: str = "a removed token's input embedding is replaced by the baseline's"
    matched_baselines: list[str] = field(default_factory=matched_methods)


@dataclass
class HeldoutResult(Result):
    """Per-prompt rows, the ABPC table with intervals (all prompts and the model-correct ones), the paired
    differences to AttnLRP, the diagnosis and the sentence that reads it (schema interpscope.heldout_faithfulness:
    `explain --faithfulness --set heldout --json` and the relevance page's held-out export)."""

    SCHEMA = "interpscope.heldout_faithfulness"
    SCHEMA_VERSION = 2  # 2: prompts run with the model's prefix token (rows' prefix_kept); settings per method
    TIMING_KEYS = ("seconds", "cpu_seconds")

    model: str
    set: str
    settings: HeldoutSettings
    rows: list[dict]
    accuracy: dict
    table: list[dict]
    fixed_sinks_table: list[dict]
    attnlrp_minus: dict
    diagnosis: dict
    sentence: str
    seconds: float
    cpu_seconds: float
    labels: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)

    def tidy(self) -> list[dict]:
        """The ABPC table: one row per (subset, baseline, method), with its interval and rank."""
        return [dict(row) for row in self.table]

    def figure(self, subset: str = "all"):
        """The page's figure of one subset ('all' or 'model_correct'): mean ABPC per method and baseline, with
        bootstrap 95% intervals."""
        from interpscope.figures.relevance.faithfulness import abpc_interval_figure

        title = {"all": "all prompts", "model_correct": "prompts the model gets right"}.get(subset, subset)
        return abpc_interval_figure([t for t in self.table if t["subset"] == subset],
                                    f"Mean ABPC, {title} (95% bootstrap interval)")


def _references(lm: LoadedModel, embeds: torch.Tensor, baselines: Sequence[str]) -> dict[str, torch.Tensor]:
    pad = getattr(lm.tokenizer, "pad_token_id", None)
    return {b: baseline_embeds(lm.adapter, embeds, b, pad) for b in baselines}


def prompt_row(lm: LoadedModel, prompt: dict, settings: HeldoutSettings, index: int) -> dict:
    """Every method's map and curves for one prompt (explained for its expected token)."""
    from interpscope.relevance.api import model_kind, run_method
    from interpscope.sinks import words

    ids, prepended = input_ids_for(lm, prompt["text"], None)  # the model's default prefix, as every view runs it
    n_tokens = int(ids.shape[1])
    prefix = [0] if prepended else []  # a prepended prefix stays in place: only the text's tokens are removed
    pieces = lm.tokenizer.encode(prompt["expected"], add_special_tokens=False)  # this model's tokenizer
    if len(pieces) != 1:
        raise InterpscopeError(f"{prompt['id']}: the expected {prompt['expected']!r} is {len(pieces)} tokens for "
                               f"{lm.name}.")
    expected = pieces[0]
    target = Target(n_tokens - 1, int(expected), token=prompt["expected"])
    with torch.no_grad():
        embeds = lm.adapter.embedding()(ids)
    references = _references(lm, embeds, settings.baselines)
    maps: dict = {}
    row = {k: prompt[k] for k in ("id", "category", "text", "expected") if k in prompt}
    row["tokens"] = lm.token_strings(ids[0])
    row["prefix_kept"] = bool(prepended)
    shares = {}
    matched = matched_methods()
    for method in settings.methods:
        for baseline in (settings.baselines if method in matched else [None]):
            options = MethodOptions(ig_steps=settings.ig_steps, baseline=baseline or "zero")
            attribution, _ = run_method(lm, ids, method, target, options=options)
            maps[(method, baseline)] = np.asarray(attribution.relevance, dtype=np.float64)
            c = attribution.conservation
            if c is not None and c.softmax_sum is not None and c.target_logit:
                shares[method] = c.softmax_sum / c.target_logit
            row["value"] = attribution.logit
            if "model_correct" not in row and attribution.output_logits is not None:  # this model's own top-1
                row["model_correct"] = int(attribution.output_logits.argmax()) == int(expected)
    rng = np.random.default_rng([settings.seed, zlib.crc32(str(prompt.get('id', index)).encode())])
    maps[(stats.RANDOM, None)] = rng.permutation(n_tokens).astype(np.float64)
    names = [*settings.methods, stats.RANDOM]
    key = {(m, b): (m, b if m in matched else None) for m in names for b in settings.baselines}
    with model_lock(lm):
        report = sink_report(lm.adapter, ids, 0 if prepended else None)  # measured massive-activation rows
        sinks = report.positions
        kept = sorted({0, *sinks})  # the prefix (or the first word, without one) and every measured sink
        curves = curves_for_maps(lm.adapter, ids, target, maps, references,
                                 [(key[(m, b)], b) for m in names for b in settings.baselines],
                                 steps=settings.curve_steps, fixed=prefix)
        first = settings.baselines[0]
        fixed = (curves_for_maps(lm.adapter, ids, target, maps, references,
                                 [(key[(m, first)], first) for m in names], steps=settings.curve_steps,
                                 fixed=kept) if n_tokens > len(kept) else {})
    row["sinks"] = sinks
    row["excluded"] = report.rows(row["tokens"], words(model_kind(lm.adapter))["sink"])  # why, as explain() says
    row["abpc"] = {b: {m: curves[(key[(m, b)], b)].abpc for m in names} for b in settings.baselines}
    row["morf_auc"] = {b: {m: curves[(key[(m, b)], b)].morf_auc for m in names} for b in settings.baselines}
    row["lerf_auc"] = {b: {m: curves[(key[(m, b)], b)].lerf_auc for m in names} for b in settings.baselines}
    if fixed:
        row["abpc_sinks_fixed"] = {first: {m: fixed[(key[(m, first)], first)].abpc for m in names}}
    through = softmax_pair(settings.methods)[0]
    row["softmax_share"] = shares.get(through) if through is not None else None
    row["position0_share"] = {m: float(abs(maps[(m, None if m not in matched else first)][0]) /
                                       (np.abs(maps[(m, None if m not in matched else first)]).sum() or 1.0))
                              for m in settings.methods}
    row["relevance"] = {m: maps[(m, None if m not in matched else first)].tolist() for m in settings.methods}
    return row


def summarize(rows: Sequence[dict], settings: HeldoutSettings, labels: dict) -> tuple[list, list, dict, dict, str]:
    """(table, table with the sinks fixed, AttnLRP minus each method, diagnosis, sentence) from per-prompt rows;
    the tables hold the 'all' subset and the 'model_correct' subset."""
    names = [*settings.methods, stats.RANDOM]
    table, fixed_table, minus = [], [], {}
    subsets = {"all": list(rows), "model_correct": [r for r in rows if r.get("model_correct")]}
    for subset, group in subsets.items():
        if not group:
            continue
        by = {b: {m: [r["abpc"][b][m] for r in group] for m in names} for b in settings.baselines}
        table += [dict(t, subset=subset) for t in stats.abpc_table(by, labels, settings.seed, settings.bootstrap)]
        fixed_rows = [r for r in group if "abpc_sinks_fixed" in r]
        first = settings.baselines[0]
        if fixed_rows:
            fixed_by = {first: {m: [r["abpc_sinks_fixed"][first][m] for r in fixed_rows] for m in names}}
            fixed_table += [dict(t, subset=subset)
                            for t in stats.abpc_table(fixed_by, labels, settings.seed, settings.bootstrap)]
        minus[subset] = {b: stats.paired_differences(by[b], "attnlrp", settings.seed, settings.bootstrap)
                         for b in settings.baselines}
    diagnosis: dict = {"ranking": {b: stats.ranking([t for t in table if t["subset"] == "all"], b)
                                   for b in settings.baselines}}
    if fixed_table:
        diagnosis["ranking_sinks_fixed"] = stats.ranking([t for t in fixed_table if t["subset"] == "all"],
                                                         settings.baselines[0])
    diagnosis["prompts_with_measured_sinks"] = sum(bool(r["sinks"]) for r in rows)
    diagnosis["prompts_with_position0_a_measured_sink"] = sum(0 in r["sinks"] for r in rows)
    diagnosis["prompts_with_a_measured_sink_after_position0"] = sum(any(i > 0 for i in r["sinks"]) for r in rows)
    diagnosis["position0_share"] = {m: float(np.mean([r["position0_share"][m] for r in rows]))
                                    for m in settings.methods}
    through, conserving = softmax_pair(settings.methods)
    shares = [(r["softmax_share"], r) for r in rows if r.get("softmax_share") is not None]
    correlation = gap = None
    mean_share = None
    if shares:
        share = [s for s, _ in shares]
        mean_share = float(np.mean(share))
        first = settings.baselines[0]
        diagnosis["softmax_share"] = dict(zip(("mean", "ci_low", "ci_high"),
                                              stats.bootstrap_mean(share, settings.bootstrap, settings.seed),
                                              strict=True))
        assert through is not None  # a softmax share is measured only for the method that has one
        correlation = stats.spearman_interval(share, [r["abpc"][first][through] for _, r in shares],
                                              settings.bootstrap, settings.seed)
        diagnosis["spearman_share_vs_attnlrp_abpc"] = correlation
        if conserving is not None:
            gap = stats.spearman_interval(share, [r["abpc"][first][through] - r["abpc"][first][conserving]
                                                  for _, r in shares], settings.bootstrap, settings.seed)
            diagnosis["spearman_share_vs_attnlrp_minus_cplrp"] = gap
        diagnosis["correlation_baseline"] = first
    everything = [t for t in table if t["subset"] == "all"]
    sentence = stats.diagnosis_sentence(everything, [t for t in fixed_table if t["subset"] == "all"], correlation,
                                        gap, mean_share, labels, through) if through is not None else ""
    return table, fixed_table, minus, diagnosis, sentence


def default_settings(lm: LoadedModel, methods: Sequence[str] | None = None, baselines: Sequence[str] | None = None,
                     **values) -> HeldoutSettings:
    """Checked settings: every method the model serves and every deletion baseline (pad only where the tokenizer
    has a pad token) unless given."""
    methods = list(methods) if methods else [m.name for m in methods_for(lm.adapter)]
    for method in methods:
        get_method(method, lm.adapter)
    if baselines is None:
        has_pad = getattr(lm.tokenizer, "pad_token_id", None) is not None
        baselines = [b for b in BASELINES if b != "pad" or has_pad]
    for baseline in baselines:
        if baseline not in BASELINES:
            raise InterpscopeError(f"Unknown baseline {baseline!r}: choose one of {', '.join(BASELINES)}.")
    settings = HeldoutSettings(methods=methods, baselines=list(baselines), **values)
    MethodOptions(ig_steps=settings.ig_steps).checked()
    if not 1 <= settings.curve_steps <= 512:
        raise InterpscopeError(f"Curve steps must be 1..512 (got {settings.curve_steps}).")
    return settings


def labels_for(settings: HeldoutSettings) -> dict[str, str]:
    """Display names of the settings' methods and of the random control."""
    return {m: METHODS[m].label for m in settings.methods} | {stats.RANDOM: "Random order (chance)"}


def run_heldout(lm: LoadedModel, prompts: Sequence[dict], methods: Sequence[str] | None = None,
                baselines: Sequence[str] | None = None, ig_steps: int = DEFAULT_IG_STEPS,
                curve_steps: int = DEFAULT_STEPS, seed: int = 0, bootstrap: int = stats.BOOTSTRAP,
                set_name: str = "heldout", progress: Progress | None = None, done: Sequence[dict] = (),
                on_row: Callable[[dict], None] | None = None) -> HeldoutResult:
    """Every method (default: all the model serves) on every prompt under every deletion baseline (default: zero,
    pad, mean; pad only where the tokenizer has one); progress(done, total) after each prompt. `done`: rows of an
    earlier run with the same settings (a resumed run skips their prompts); on_row(row) after each new row."""
    if not prompts:
        raise InterpscopeError("No prompts to run.")
    settings = default_settings(lm, methods, baselines, ig_steps=ig_steps, curve_steps=curve_steps, seed=seed,
                                bootstrap=bootstrap)
    labels = labels_for(settings)
    wall, cpu = time.perf_counter(), time.process_time()
    finished = {r["id"]: r for r in done}
    rows, skipped = [], []
    for index, prompt in enumerate(prompts):
        if prompt["id"] in finished:
            rows.append(finished[prompt["id"]])
        else:
            try:
                rows.append(prompt_row(lm, prompt, settings, index))
                if on_row is not None:
                    on_row(rows[-1])
            except InterpscopeError as err:  # e.g. the expected token is two tokens for this model
                skipped.append({"id": prompt["id"], "error": str(err)})
        if progress is not None:
            progress(index + 1, len(prompts))
    if not rows:
        raise InterpscopeError(f"No prompt could be run on {lm.name}: {skipped[0]['error']}")
    table, fixed_table, minus, diagnosis, sentence = summarize(rows, settings, labels)
    return HeldoutResult(model=lm.name, set=set_name, settings=settings, rows=rows, accuracy=accuracy(rows),
                         table=table, fixed_sinks_table=fixed_table, attnlrp_minus=minus, diagnosis=diagnosis,
                         sentence=sentence, seconds=time.perf_counter() - wall,
                         cpu_seconds=time.process_time() - cpu, labels=labels, skipped=skipped)


@dataclass
class TextFaithfulness(Result):
    """One map's faithfulness on its own text: MoRF / LeRF curves, their areas and ABPC under one deletion
    baseline, beside the random-order control (mean and 95% interval over `random_orders` seeded orders). Schema
    interpscope.faithfulness: `explain --faithfulness --json` and the API's interpscope.faithfulness()."""

    SCHEMA = "interpscope.faithfulness"
    SCHEMA_VERSION = 2  # 2: settings, the option values the map was computed with

    method: str
    baseline: str
    steps: int
    fractions: list
    morf: list
    lerf: list
    morf_auc: float
    lerf_auc: float
    abpc: float
    random_abpc: float
    random_ci_low: float
    random_ci_high: float
    random_orders: int
    seed: int
    bos_kept: bool = False
    method_label: str | None = None
    settings: dict | None = None

    def tidy(self) -> list[dict]:
        """One row per point of the curves: the fraction of tokens removed, the value after MoRF and LeRF removal."""
        return [{"method": self.method, "baseline": self.baseline, "fraction_removed": f, "morf": m, "lerf": le,
                 "abpc": self.abpc} for f, m, le in zip(self.fractions, self.morf, self.lerf, strict=True)]

    def figure(self):
        """The relevance page's perturbation-curve figure for this one map."""
        return _curves_figure([self], "Perturbation curves on this input")


def _curves_figure(curves: Sequence[TextFaithfulness], title: str):
    from interpscope.figures.relevance import curves_figure

    return curves_figure({c.method_label or c.method: (c.fractions, c.morf, c.lerf, c.abpc) for c in curves}, title)


@dataclass
class FaithfulnessComparison(Result):
    """Every method's map on one input, each with its MoRF / LeRF curves, ABPC and random-order control under one
    deletion baseline (schema interpscope.faithfulness_comparison: the relevance page's "Curves for every method"
    export; each entry of `curves` is a TextFaithfulness body)."""

    SCHEMA = "interpscope.faithfulness_comparison"
    SCHEMA_VERSION = 2  # 2: each curve's settings

    model: str
    tokens: list[str]
    target: Target
    baseline: str
    curves: list[TextFaithfulness]

    def tidy(self) -> list[dict]:
        """One row per (method, point of the curves)."""
        return [row for curve in self.curves for row in curve.tidy()]

    def figure(self):
        """The relevance page's figure: MoRF (solid) and LeRF (dashed) curves per method."""
        return _curves_figure(self.curves, "Perturbation curves on this input")


def compare_faithfulness(lm: LoadedModel, results: Sequence, baseline: str = "zero", steps: int = DEFAULT_STEPS,
                         seed: int = 0, random_orders: int = 16) -> FaithfulnessComparison:
    """text_faithfulness of several maps of one input and target (RelevanceResults of explain()), side by side."""
    if not results:
        raise InterpscopeError("Give at least one relevance map to compare.")
    first = results[0]
    if any(r.token_ids != first.token_ids or r.target != first.target for r in results):
        raise InterpscopeError("The maps to compare must explain the same input and target.")
    curves = [text_faithfulness(lm, r, baseline=baseline, steps=steps, seed=seed, random_orders=random_orders)
              for r in results]
    return FaithfulnessComparison(model=first.model, tokens=list(first.tokens), target=first.target,
                                  baseline=baseline, curves=curves)


def text_faithfulness(lm: LoadedModel, result, baseline: str = "zero", steps: int = DEFAULT_STEPS, seed: int = 0,
                      random_orders: int = 16) -> TextFaithfulness:
    """Faithfulness of one RelevanceResult (interpscope.relevance.api.explain) on its own input (a BOS that explain
    prepended stays in place: only the text's tokens are removed)."""
    if baseline not in BASELINES:
        raise InterpscopeError(f"Unknown baseline {baseline!r}: choose one of {', '.join(BASELINES)}.")
    ids = torch.tensor([result.token_ids], device=lm.device)
    with torch.no_grad():
        embeds = lm.adapter.embedding()(ids)
    references = _references(lm, embeds, [baseline])
    rng = np.random.default_rng(seed)
    maps = {"map": np.asarray(result.relevance, dtype=np.float64)}
    maps |= {f"random-{i}": rng.permutation(ids.shape[1]).astype(np.float64) for i in range(random_orders)}
    fixed = [0] if getattr(result, "bos_prepended", False) else []  # a BOS explain() put first is not the text's
    with model_lock(lm):
        curves = curves_for_maps(lm.adapter, ids, result.target, maps, references,
                                 [(k, baseline) for k in maps], steps=steps, fixed=fixed)
    mine = curves[("map", baseline)]
    if mine.morf_auc is None or mine.lerf_auc is None:  # curves_for_maps always sets them
        raise RuntimeError("the perturbation curves carry no areas")
    chance = [curves[(f"random-{i}", baseline)].abpc for i in range(random_orders)]
    mean, low, high = stats.bootstrap_mean(chance, seed=seed)
    return TextFaithfulness(method=result.method, baseline=baseline, steps=steps, fractions=mine.fractions.tolist(),
                            morf=mine.morf.tolist(), lerf=mine.lerf.tolist(), morf_auc=mine.morf_auc,
                            lerf_auc=mine.lerf_auc, abpc=mine.abpc, random_abpc=mean, random_ci_low=low,
                            random_ci_high=high, random_orders=random_orders, seed=seed, bos_kept=bool(fixed),
                            method_label=getattr(result, "method_label", None),
                            settings=getattr(result, "settings", None))
