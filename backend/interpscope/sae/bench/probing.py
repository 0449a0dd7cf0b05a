"""Sparse probing (SAEBench; Gurnee et al. 2023): how much of a labelled distinction a few SAE latents carry.

Task: which Jane Austen novel a passage comes from (the bundled corpus, assets/corpus/austen; offline). Passages
are the first `tokens` tokens of paragraphs, train passages from the corpus's train split and test passages from
its held-out test split, `per_novel` train and `per_novel_test` test passages per novel. One binary task per novel
(this novel vs the others, negatives sampled to balance the classes). Each passage is one vector: the mean over
positions 1.. (position 0 and massive-activation rows, the attention sinks, left out) of the hook's activation, or
of the SAE's latents.

Per task: the k latents (k = 1, 2, 5, 10) with the largest mean difference between the classes on train feed a
logistic regression, scored by accuracy on test; beside it, the same probe on all d_model activations (an upper
reference), the same top-k probe on a random SAE of the same shape (control), and the majority class's share of
the test set (chance). Reported: the mean over the six tasks.
"""
from __future__ import annotations

import re
import time

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.corpus import _bundled_paragraphs, _split_of
from interpscope.sae.bench.common import (
    BenchInputs,
    Encoder,
    cached_array,
    few_threads,
    fit_logistic,
    hook_rows,
    random_encoder,
)
from interpscope.sae.bench.result import Measure, MetricResult
from interpscope.sinks import sink_rows

NAME = "probing"
NEEDS_STORE = False
KS = (1, 2, 5, 10)
MEANING = ("Sparse probing: can k SAE latents (chosen by mean difference on train) tell which Austen novel a "
           "passage comes from? Held-out accuracy per k, beside a probe on all activations, a random SAE's k "
           "latents and the majority class (chance). Higher is better.")
DEFAULTS = {"tokens": 16, "per_novel": 40, "per_novel_test": 20}


def novel_passages(tokenizer, tokens: int, per_novel: int, per_novel_test: int,
                   seed: int = 0) -> tuple[list[str], torch.Tensor, np.ndarray, np.ndarray]:
    """(novel names, token windows [N, tokens], novel index per window, True for test windows)."""
    by_novel: dict[str, dict[str, list[str]]] = {}
    for key, text in _bundled_paragraphs():
        novel = key.split(":")[0].removesuffix(".txt")
        split = _split_of(key)
        if split in ("train", "test") and not re.match(r"^(chapter|volume)\b", text, re.I):
            by_novel.setdefault(novel, {"train": [], "test": []})[split].append(text)
    names = sorted(by_novel)
    rng = np.random.default_rng(seed)
    windows, labels, is_test = [], [], []
    for index, novel in enumerate(names):
        for split, wanted in (("train", per_novel), ("test", per_novel_test)):
            texts = by_novel[novel][split]
            taken = 0
            for i in rng.permutation(len(texts)):
                ids = tokenizer(texts[i], add_special_tokens=False).input_ids
                if len(ids) < tokens:
                    continue
                windows.append(ids[:tokens])
                labels.append(index)
                is_test.append(split == "test")
                taken += 1
                if taken == wanted:
                    break
            if taken < wanted:
                raise InterpscopeError(f"{novel}'s {split} split has only {taken} passages of {tokens} tokens.")
    return names, torch.tensor(windows, dtype=torch.long), np.array(labels), np.array(is_test)


def pooled(rows: torch.Tensor, encode=None) -> torch.Tensor:
    """Mean over positions 1.. of each window [N, T, d] (sink rows left out), of the rows or of encode(rows)."""
    means = []
    for first in range(0, rows.shape[0], 64):  # in chunks: d_sae latents of every position would be large
        body = rows[first:first + 64, 1:]
        keep = ~sink_rows(body.reshape(-1, body.shape[-1])).reshape(body.shape[:2])
        values = body if encode is None else encode(body.reshape(-1, body.shape[-1])).reshape(*body.shape[:2], -1)
        weights = keep.float()[..., None]
        means.append((values * weights).sum(1) / weights.sum(1).clamp_min(1.0))
    return torch.cat(means)


def task_split(labels: np.ndarray, is_test: np.ndarray, positive: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a balanced train and test set for 'novel == positive' (negatives sampled from the rest)."""
    rng = np.random.default_rng(seed + positive)
    chosen = []
    for test in (False, True):
        pos = np.flatnonzero((labels == positive) & (is_test == test))
        neg = np.flatnonzero((labels != positive) & (is_test == test))
        chosen.append(np.sort(np.concatenate([pos, rng.choice(neg, size=min(len(pos), len(neg)), replace=False)])))
    return chosen[0], chosen[1]


def topk_accuracy(features: torch.Tensor, y: np.ndarray, train: np.ndarray, test: np.ndarray, k: int) -> float:
    """Test accuracy of a logistic probe on the k columns with the largest train mean difference between classes."""
    y_t = torch.as_tensor(y)
    ftr = features[torch.as_tensor(train)]
    diff = (ftr[y_t[train] == 1].mean(0) - ftr[y_t[train] == 0].mean(0)).abs().numpy()
    cols = torch.as_tensor(np.argsort(-diff, kind="stable")[:k])
    probe = fit_logistic(ftr[:, cols], y_t[train], 2, l2=1e-4, standardise=True)
    return float((probe.predict(features[torch.as_tensor(test)][:, cols]) == y_t[test]).float().mean())


def full_accuracy(features: torch.Tensor, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    y_t = torch.as_tensor(y)
    probe = fit_logistic(features[torch.as_tensor(train)], y_t[train], 2, l2=1e-2)
    return float((probe.predict(features[torch.as_tensor(test)]) == y_t[test]).float().mean())


def probing_tasks(activations: torch.Tensor, latents: torch.Tensor, control: torch.Tensor, labels: np.ndarray,
                  is_test: np.ndarray, names: list[str], seed: int = 0) -> list[dict]:
    """Per binary task (one per class): accuracies of top-k latents, the random control's, all activations, chance
    (on one thread: many small probe fits)."""
    with few_threads():
        return [_task(activations, latents, control, labels, is_test, index, name, seed)
                for index, name in enumerate(names)]


def _task(activations: torch.Tensor, latents: torch.Tensor, control: torch.Tensor, labels: np.ndarray,
          is_test: np.ndarray, index: int, name: str, seed: int) -> dict:
    """One task's row: 'class == index' against a balanced sample of the rest."""
    train, test = task_split(labels, is_test, index, seed)
    y = (labels == index).astype(np.int64)
    majority = max(y[test].mean(), 1 - y[test].mean())
    return {"task": name, "train": len(train), "test": len(test), "chance": float(majority),
            "full_activations": full_accuracy(activations, y, train, test),
            **{f"sae_top_{k}": topk_accuracy(latents, y, train, test, k) for k in KS},
            **{f"random_top_{k}": topk_accuracy(control, y, train, test, k) for k in KS}}


def probing_measures(rows: list[dict]) -> list[Measure]:
    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))
    chance = mean("chance")
    measures = [Measure(f"top-{k} SAE latents accuracy", mean(f"sae_top_{k}"), mean(f"random_top_{k}"),
                        f"top-{k} latents of a random SAE", True) for k in KS]
    measures.append(Measure("all-activation probe accuracy", mean("full_activations"), chance,
                            "the majority class (chance)", True))
    measures.append(Measure("top-1 SAE latent vs chance", mean("sae_top_1"), chance, "the majority class (chance)",
                            True))
    return measures


def run(inputs: BenchInputs) -> MetricResult:
    """Sparse probing of inputs.encoder on the Austen-novel tasks."""
    started = time.perf_counter()
    settings = {**DEFAULTS, **inputs.options.get(NAME, {})}
    lm = inputs.lm
    names, windows, labels, is_test = novel_passages(lm.tokenizer, settings["tokens"], settings["per_novel"],
                                                     settings["per_novel_test"], inputs.seed)
    parts = {"task": "austen-novel", "model": lm.name, "hook": inputs.hook_name, "ids": windows.tolist()}

    def compute() -> np.ndarray:
        return hook_rows(lm, inputs.hook_name, windows, batch_size=32,
                         progress=lambda d, t: inputs.report(0.6 * d / t, f"probing: passages {d}/{t}")).numpy()
    rows = torch.from_numpy(cached_array(parts, compute, inputs.use_cache))
    inputs.report(0.7, "probing: this SAE's latents")
    activations = pooled(rows)
    latents = pooled(rows, inputs.encoder.encode)
    flat = rows[:, 1:].reshape(-1, rows.shape[-1])
    flat = flat[~sink_rows(flat)]
    flat = flat[torch.randperm(flat.shape[0], generator=torch.Generator().manual_seed(inputs.seed))[:4096]]
    density = float((inputs.encoder.encode(flat) > 0).float().mean())
    control_encoder: Encoder = random_encoder(rows.shape[-1], inputs.encoder.d_sae, flat, density, inputs.seed)
    control = pooled(rows, control_encoder.encode)
    inputs.report(0.8, "probing: probes")
    task_rows = probing_tasks(activations, latents, control, labels, is_test, names, inputs.seed)
    return MetricResult(NAME, MEANING, probing_measures(task_rows),
                        settings={**settings, "ks": list(KS), "novels": names, "passages": int(len(labels)),
                                  "control": control_encoder.label},
                        details=task_rows, seconds=time.perf_counter() - started)
