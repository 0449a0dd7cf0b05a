"""Frequency filters on attention / MLP outputs and the Table-1-style ablation (docs/methods/fourier.md).

A filter removes chosen Fourier components from what a module output says about the numbers: it projects the
output h onto null(M), M = B F W_U_num^T (B picks the basis rows to remove), P = I - M^+ M. Then
B F W_U_num^T (P h) = 0 while the rest of h is kept. If rank(M) = d_model the null space is {0} and the filter
zeroes the whole output: that is checked and reported. The filter runs in every layer through
interpscope.capture.hooks on blocks.{l}.hook_attn_out / blocks.{l}.hook_mlp_out, at the answer position (default) or
at every token. A sweep over prompts is sharded by (configuration, batch of prompts), here or on Ray workers.
Each filter row stands beside its control (interpscope.fourier.controls): a random subspace of the same rank removed
from the same number-direction space, over several seeds, and the specificity filter effect / control effect.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import hooks, model_lock
from interpscope.config import InterpscopeError
from interpscope.fourier.addition import pad_right, score, token_to_number
from interpscope.fourier.basis import FourierBasis, fourier_basis
from interpscope.fourier.controls import (
    DEFAULT_CONTROL_SEEDS,
    SPECIFIC,
    Control,
    compare,
    control_projection,
    describe,
    null_space_projector,
)
from interpscope.fourier.data import PromptPairs, render
from interpscope.fourier.documents import FilterTableDocument
from interpscope.fourier.lens import check_tau, default_tau
from interpscope.fourier.numbers import NumberTokens, number_unembedding
from interpscope.scale.pool import Scale, Shard, map_shards

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

KINDS = {"low": "low-pass (removes high frequencies, k >= tau)",
         "high": "high-pass (removes low frequencies, 1 <= k < tau)"}
MODULES = {"attn": ("hook_attn_out",), "mlp": ("hook_mlp_out",), "both": ("hook_attn_out", "hook_mlp_out")}


@dataclass
class Projection:
    """P [d, d] onto null(M); rank of M and whether the filter would zero every output."""

    matrix: np.ndarray
    rank: int
    d_model: int
    removed_rows: int

    @property
    def zeroes_everything(self) -> bool:
        return self.rank >= self.d_model


def removed_frequencies(kind: str, tau: int, n_numbers: int) -> range:
    """The frequencies a filter removes: low-pass removes k >= tau, high-pass removes 1 <= k < tau."""
    if kind not in KINDS:
        raise InterpscopeError(f"Unknown filter kind {kind!r}: choose low (low-pass) or high (high-pass).")
    return range(tau, n_numbers // 2 + 1) if kind == "low" else range(1, tau)


def null_projection(unembed_num: np.ndarray, basis: FourierBasis, rows: np.ndarray) -> Projection:
    """P = I - M^+ M for M = B F W_U_num^T; unembed_num is W_U_num [d_model, N] (float64 math)."""
    unembed_num = np.asarray(unembed_num, dtype=np.float64)
    matrix, rank = null_space_projector(basis.matrix[rows] @ unembed_num.T)
    return Projection(matrix=matrix, rank=rank, d_model=unembed_num.shape[0], removed_rows=len(rows))


def filter_projection(lm: LoadedModel, numbers: NumberTokens, kind: str, tau: int) -> Projection:
    basis = fourier_basis(numbers.n_numbers)
    rows = basis.rows(removed_frequencies(kind, tau, numbers.n_numbers))
    unembed = number_unembedding(lm.adapter, numbers).double().cpu().numpy()
    return null_projection(unembed, basis, rows)


@dataclass
class FilterRow:
    """One row of the ablation table."""

    kind: str
    modules: str
    removed: str
    loss: float
    accuracy: float
    within_2: float
    within_10: float
    rank: int
    zeroes_everything: bool
    errors: np.ndarray
    error_counts: dict = field(default_factory=dict)
    control: Control | None = None


@dataclass
class FilterTable(FilterTableDocument):
    model: str
    template: str
    numbers: int
    tau: int
    d_model: int
    prompts: int
    positions: str
    rows: list[FilterRow]
    seconds: float
    warnings: list[str] = field(default_factory=list)
    requested_prompts: int | None = None
    control_seeds: list[int] = field(default_factory=list)
    split: str | None = None  # the split the prompts came from, when the pairs were a PromptPairs

    def table_reading(self) -> str | None:
        return reading(self)


def error_counts(errors: np.ndarray) -> dict:
    """Wrong answers sorted by kind: multiples of 10, small (|e| < 6), other, and non-number predictions.

    errors: prediction - answer per prompt, NaN where the top token is not a number.
    """
    wrong = errors[~(errors == 0)]
    numeric = wrong[~np.isnan(wrong)]
    return {"wrong": int(len(wrong)), "multiple_of_10": int(np.sum(numeric % 10 == 0)),
            "small_lt_6": int(np.sum(np.abs(numeric) < 6)), "other": int(np.sum((numeric % 10 != 0) &
                                                                                  (np.abs(numeric) >= 6))),
            "not_a_number": int(len(wrong) - len(numeric))}


def evaluate_batch(lm: LoadedModel, numbers: NumberTokens, texts: list[str], answers: np.ndarray, edits: dict,
                   where: dict | None = None) -> tuple[float, np.ndarray]:
    """Summed loss (cross-entropy of the answer token) and predictions of one batch of prompts with the given hook
    edits active. where: if given, where["last"] is set to the batch's last-token indices before its forward pass,
    for edits that act on the answer position only."""
    lookup = token_to_number(numbers)
    answer_tokens = torch.as_tensor(numbers.ids[answers])
    with model_lock(lm), torch.no_grad(), hooks(lm.adapter, edits):
        ids, mask, last = pad_right(lm.tokenizer, texts)
        if where is not None:
            where["last"] = last.to(lm.device)
        logits = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), use_cache=False).logits
        final = logits[torch.arange(len(ids)), last.to(lm.device)].float()
        target = answer_tokens.to(final.device)
        loss = torch.nn.functional.cross_entropy(final, target, reduction="sum").item()
        predictions = [lookup.get(int(t), -1) for t in final.argmax(dim=-1).tolist()]
    return loss, np.array(predictions, dtype=np.int64)


def evaluate(lm: LoadedModel, numbers: NumberTokens, texts: list[str], answers: np.ndarray, edits: dict,
             batch: int = 512,
             where: dict | None = None):
    """Loss (mean cross-entropy of the answer token) and predictions with the given hook edits active, batch by
    batch (see evaluate_batch)."""
    losses, predictions = [], []
    for start in range(0, len(texts), batch):
        loss, predicted = evaluate_batch(lm, numbers, texts[start:start + batch], answers[start:start + batch], edits,
                                         where)
        losses.append(loss)
        predictions.append(predicted)
    return sum(losses) / len(texts), np.concatenate(predictions)


POSITIONS = {"last": "the answer position (the prompt's last token)", "all": "every token"}


def projection_edit(matrix: torch.Tensor, where: dict | None = None):
    """Hook edit applying h -> P h (P symmetric) at every token, or only at where["last"] when where is given."""
    def apply(output: torch.Tensor) -> torch.Tensor:
        projected = output @ matrix.to(output.dtype)
        if where is None:
            return projected
        rows = torch.arange(output.shape[0], device=output.device)
        edited = output.clone()
        edited[rows, where["last"]] = projected[rows, where["last"]]
        return edited
    return apply


@dataclass
class FilterJob:
    """What a worker (or this process) computes for one shard of a filter table: one batch of prompts under one
    filter configuration (the projections come from the driver, so every worker applies the same matrices)."""

    numbers: NumberTokens
    configs: list[tuple[str, str]]  # (matrix key: 'none', a kind, or 'control|kind|seed'; modules)
    matrices: dict[str, np.ndarray]
    positions: str

    def run(self, lm: LoadedModel, shard: Shard) -> tuple[float, np.ndarray]:
        config, texts, answers = shard.payload
        key, modules = self.configs[config]
        edits: dict = {}
        where: dict | None = None
        if key != "none":
            matrix = torch.as_tensor(self.matrices[key], device=lm.device)
            where = {} if self.positions == "last" else None
            edits = {f"blocks.{layer}.{point}": projection_edit(matrix, where)
                     for layer in range(lm.adapter.n_layers) for point in MODULES[modules]}
        return evaluate_batch(lm, self.numbers, texts, answers, edits, where=where if edits else None)


def filter_table(lm: LoadedModel, numbers: NumberTokens, pairs: np.ndarray | PromptPairs, template: str = "{a}+{b}=",
                 tau: int | None = None, configs: list[tuple[str, str]] | None = None, progress=None,
                 positions: str = "last", batch_size: int = 512, scale: Scale | None = None,
                 control_seeds: int | list[int] = DEFAULT_CONTROL_SEEDS) -> FilterTable:
    """Loss, accuracy and error histogram with no filter and each (kind, modules) filter in all layers (serves
    the Fourier page's Filters tab). pairs: operand pairs [P, 2], or a PromptPairs (interpscope.fourier.data) whose
    request is kept: when its split held fewer pairs than asked for, the table says so in `warnings` and
    `requested_prompts` (never silently fewer).

    positions: 'last' filters the module outputs at the answer position only (where W_U reads them), 'all' at
    every token (operand positions too). The sweep is sharded by (configuration, batch of prompts): run here in
    order, or on Ray workers with `scale`; the losses are summed here in batch order, so the table is the same.

    control_seeds: how many seeds (0..n-1), or which, for the same-rank random-subspace control of every filter
    row (0 or [] leaves the controls out)."""
    requested, note, split = None, None, None
    if isinstance(pairs, PromptPairs):
        requested, note, split, pairs = pairs.requested, pairs.note, pairs.split, pairs.pairs
    if positions not in POSITIONS:
        raise InterpscopeError(f"Unknown positions {positions!r}: choose last or all.")
    start_time = time.perf_counter()
    n_numbers = numbers.n_numbers
    tau = check_tau(default_tau(n_numbers) if tau is None else tau, n_numbers)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    answers = pairs.sum(axis=1)
    if len(pairs) == 0 or answers.max() >= n_numbers:
        raise InterpscopeError(f"Need prompts whose sums are below {n_numbers}.")
    texts = render(template, pairs)
    configs = configs if configs is not None else [("none", "none")] + [
        (kind, modules) for kind in ("high", "low") for modules in ("both", "mlp", "attn")]
    for kind, modules in configs:
        if kind != "none" and modules not in MODULES:
            raise InterpscopeError(f"Unknown modules {modules!r}: choose attn, mlp or both.")
    seeds = list(range(control_seeds)) if isinstance(control_seeds, int) else [int(s) for s in control_seeds]
    projections = {kind: filter_projection(lm, numbers, kind, tau) for kind in KINDS}
    matrices = {kind: p.matrix for kind, p in projections.items()}
    unembed = number_unembedding(lm.adapter, numbers).double().cpu().numpy()
    job_configs = list(configs)
    for kind, modules in configs:
        if kind == "none" or projections[kind].zeroes_everything:
            continue
        for seed in seeds:
            key = f"control|{kind}|{seed}"
            if key not in matrices:
                matrices[key] = control_projection(unembed, projections[kind].rank, seed)
            job_configs.append((key, modules))
    job = FilterJob(numbers, job_configs, matrices, positions)
    starts = range(0, len(texts), batch_size)
    shards = [Shard(len(starts) * c + b, start, min(start + batch_size, len(texts)),
                    (c, texts[start:start + batch_size], answers[start:start + batch_size]))
              for c in range(len(job_configs)) for b, start in enumerate(starts)]
    results: dict[int, tuple[float, np.ndarray]] = {}

    def collect(shard: Shard, result: tuple[float, np.ndarray]) -> None:
        results[shard.index] = result
        kind, modules = job_configs[shard.payload[0]]
        if progress is not None and all(len(starts) * shard.payload[0] + b in results for b in range(len(starts))):
            progress(len(results) / len(shards), f"{kind.replace('|', ' ')} on {modules}")

    map_shards(job, shards, collect, lm=lm, scale=scale)
    def accuracy_of(index: int) -> tuple[float, np.ndarray, np.ndarray]:
        batches = [results[len(starts) * index + b] for b in range(len(starts))]
        loss = sum(loss for loss, _ in batches) / len(texts)
        predictions = np.concatenate([predicted for _, predicted in batches])
        return loss, predictions, np.asarray(score(predictions, answers))

    rows, warnings = [], ([note] if note else [])
    clean = None
    for index, (kind, modules) in enumerate(configs):
        projection = projections[kind] if kind != "none" else None
        if projection is not None and projection.zeroes_everything:
            warnings.append(f"{KINDS[kind]} on {modules}: rank(B F W_U) = {projection.rank} = d_model, so the "
                            f"filter zeroes the whole output (raise d_model or change tau).")
        loss, predictions, (exact, near, rough) = accuracy_of(index)
        errors = np.where(predictions >= 0, predictions - answers, np.nan).astype(np.float64)
        clean = exact if kind == "none" else clean
        control = None
        control_rows = [c for c, (key, mods) in enumerate(job_configs)
                        if mods == modules and key.startswith(f"control|{kind}|")]
        if control_rows and clean is not None:
            control = compare(clean, exact, [accuracy_of(c)[2][0] for c in control_rows], seeds, len(pairs))
        rows.append(FilterRow(
            kind=kind, modules=modules,
            removed="nothing" if kind == "none" else ("high" if kind == "low" else "low") + " frequencies",
            loss=loss, accuracy=exact, within_2=near, within_10=rough,
            rank=projection.rank if projection else 0,
            zeroes_everything=bool(projection and projection.zeroes_everything),
            errors=errors, error_counts=error_counts(errors), control=control))
    return FilterTable(model=lm.name, template=template, numbers=n_numbers, tau=tau, d_model=lm.adapter.d_model,
                       prompts=len(pairs), positions=positions, rows=rows, seconds=time.perf_counter() - start_time,
                       warnings=warnings, requested_prompts=requested, control_seeds=seeds, split=split)


LABELS = {"high": "removing low frequencies", "low": "removing high frequencies"}
MODULE_WORDS = {"both": "attention + MLP", "attn": "attention", "mlp": "the MLPs"}


def reading(table: FilterTable) -> str | None:
    """A sentence about what the filter table shows, built from its own numbers (None without the three rows it
    compares): how much accuracy removing each band from attention + MLP costs, whether that is more than
    removing a random subspace of the same rank costs (the control), and only then which regime it points to."""
    rows = {(r.kind, r.modules): r for r in table.rows}
    if not {("none", "none"), ("high", "both"), ("low", "both")} <= set(rows):
        return None
    base = rows[("none", "none")].accuracy
    lost_low, lost_high = base - rows[("high", "both")].accuracy, base - rows[("low", "both")].accuracy
    sentence = (f"Removing low frequencies from attention + MLP costs {lost_low:.1%} accuracy and removing high "
                f"frequencies {lost_high:.1%} (of {base:.1%}; the paper's fine-tuned GPT-2-XL lost 93.8 and 72.7 "
                "points). ")
    if base < 0.2:
        return sentence + "The model barely adds these prompts even unfiltered, so the bands' roles cannot be read."
    controls = {kind: rows[(kind, "both")].control for kind in ("high", "low")}
    high, low = controls["high"], controls["low"]
    if high is None or low is None:
        return sentence + _regime_without_controls(base, lost_low, lost_high) + (
            " No same-rank random control was run, so this does not show the damage is specific to the frequencies.")
    clauses = [describe(f"{LABELS[kind].capitalize()} from attention + MLP", control, rows[(kind, "both")].rank)
               for kind, control in (("high", high), ("low", low))]
    sentence = (f"{clauses[0]}; {clauses[1][0].lower()}{clauses[1][1:]} (clean accuracy {base:.1%}; the paper's "
                "fine-tuned GPT-2-XL lost 93.8 and 72.7 points). ")
    specific = {key: row.control for key, row in rows.items() if row.control is not None
                and row.control.verdict == "more damaging than"}
    saturated = sorted({rows[(kind, "both")].rank for kind, control in controls.items()
                        if control is not None and control.accuracy_mean < 0.2 * base})
    if saturated:
        sentence += (f"At rank {' and '.join(str(r) for r in saturated)} the random control alone leaves under a fifth "
                     "of the clean accuracy, so such rows cannot tell Fourier directions from any number directions. ")
    if not specific:
        return sentence + (f"No filter is clearly more damaging (specificity >= {SPECIFIC:g}, beyond two control sds) "
                           "than removing a random subspace of the same rank from the number directions, so this "
                           "table does not show that the answer lives in these frequency bands: it shows how many "
                           "number directions the model can lose.")
    named = ", ".join(f"{LABELS[kind]} from {MODULE_WORDS[modules]} (specificity "
                      f"{'undefined' if control.specificity is None else f'{control.specificity:.2f}'})"
                      for (kind, modules), control in specific.items())
    bands = {kind for kind, _ in specific}
    if bands == {"high", "low"}:
        regime = ("both bands matter beyond their rank, low frequencies for magnitude and high ones for the last "
                  "digit, like the pre-trained models of the paper")
    elif bands == {"high"}:
        regime = ("only the low band matters beyond its rank: the model relies on low-frequency (magnitude) "
                  "features, the from-scratch regime")
    else:
        regime = ("only the high band matters beyond its rank: the model relies on high-frequency (modular) "
                  "features")
    return sentence + f"Beyond the control: {named}; {regime}."


def _regime_without_controls(base: float, lost_low: float, lost_high: float) -> str:
    small, large = 0.1 * base, 0.5 * base
    if lost_high <= small and lost_low >= large:
        return ("It loses little without its high frequencies and a lot without its low ones: it relies on "
                "low-frequency (magnitude) features, the from-scratch regime.")
    if lost_high >= large and lost_low >= large:
        return ("It needs both bands, low frequencies for magnitude and high ones for the last digit, like the "
                "pre-trained models of the paper.")
    if lost_high > lost_low:
        return "High frequencies matter more to it than low ones here."
    return ("Low frequencies matter more to it than high ones, but removing high frequencies still costs "
            f"{lost_high:.1%}: it is not purely low-frequency.")
