"""First-letter feature absorption (Chanin et al. 2024, "A is for Absorption"; SAEBench's absorption metric).

Tasks from the tokenizer alone: vocabulary tokens that are one alphabetic word, with a leading space (" sun") or
without ("sun"), labelled by their first letter. Each word is read at the hook after a short prefix of
"word: LETTER" examples (in-context, as SAEBench does); the word is the prompt's last token.

1. A linear probe (26-way logistic regression) on the activations of 70% of the words predicts the first letter;
   its accuracy on the other 30% stands beside the majority letter's share (chance).
2. Per letter L, the SAE's main latent(s): latents ranked by mean activation difference (words starting with L
   minus the rest) on train; k-sparse probes on the top k (k = 1..5) are scored by F1 on test, and k grows while
   F1 rises by more than `split_gain` (0.03): k > 1 means the letter's feature is split over several latents.
3. Absorption: among test words starting with L that the probe classifies right, those on which no main latent
   fires, and an active latent outside the main ones whose decoder direction is aligned with the probe (cosine >=
   `min_cosine`) carries at least `min_share` of the positive projection of the active latents onto the probe
   direction (sum over active j of f_j * W_dec[j] . p). The absorption rate of L is their share of those words;
   the metric is its mean over letters. The miss rate (main latents silent, absorbed or not) bounds it above.
Control: the same on a random SAE of the same shape that fires as often (common.random_encoder).
"""
from __future__ import annotations

import string
import time
from typing import Any

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.sae.bench.common import (
    BenchInputs,
    Encoder,
    binary_f1,
    cached_array,
    few_threads,
    fit_logistic,
    hook_rows,
    random_encoder,
)
from interpscope.sae.bench.result import Measure, MetricResult

NAME = "absorption"
NEEDS_STORE = False
LETTERS = string.ascii_lowercase
PREFIX = "Words and their first letters.\nsalt: S\nriver: R\nmorning: M\nglad: G\n"
MEANING = ("First-letter absorption: a probe reads 'starts with L' from the activations; the SAE's main latent for L "
           "should fire on every such word. Absorption rate = share of correctly probed words on which the main "
           "latent is silent and a letter-aligned latent (e.g. one for that very token) carries the letter instead. "
           "Lower is better; compare with a random SAE of the same shape.")
MIN_WORDS = 2  # one word to fit the probe on and one to test it; fewer than asked for runs, and the result says so
DEFAULTS = {"n_words": 2400, "train_fraction": 0.7, "max_k": 5, "split_gain": 0.03, "min_cosine": 0.1,
            "min_share": 0.4, "min_test_words": 8}


def letter_words(tokenizer, n_words: int, seed: int = 0) -> list[tuple[int, str]]:
    """(token id, text) of up to n_words vocabulary tokens that are one ASCII word of >= 2 letters, with or without
    a leading space, sampled with a seed."""
    vocab = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(vocab)])
    found = []
    for token_id, text in enumerate(texts):
        word = text[1:] if text.startswith(" ") else text
        if len(word) >= 2 and word.isascii() and word.isalpha():
            found.append((token_id, text))
    rng = np.random.default_rng(seed)
    picked = rng.permutation(len(found))[:n_words]
    return [found[i] for i in sorted(picked)]


def fewer_words_note(found: int, asked: int, letters_scored: int, min_test_words: int) -> str | None:
    """What the result says when the tokenizer had fewer words than asked for (None when it had enough)."""
    if found >= asked:
        return None
    scored = (f"{letters_scored} letter(s) had enough words to be scored" if letters_scored else
              f"no letter had {min_test_words} words in both the train and the test split, so only the probe's "
              "accuracy is measured")
    return (f"The tokenizer has only {found} single-token word(s) of two or more ASCII letters, fewer than the "
            f"{asked} asked for: absorption ran on those {found}; {scored}.")


def word_activations(inputs: BenchInputs, words: list[tuple[int, str]]) -> torch.Tensor:
    """The hook's activation at each word, read as the last token after PREFIX (cached per model, hook, words)."""
    lm = inputs.lm
    prefix = lm.tokenizer(PREFIX, add_special_tokens=False).input_ids
    ids = torch.tensor([[token_id] for token_id, _ in words], dtype=torch.long)

    def compute() -> np.ndarray:
        return hook_rows(lm, inputs.hook_name, ids, batch_size=256, prefix=prefix,
                         progress=lambda d, t: inputs.report(0.6 * d / t, f"absorption: words {d}/{t}"))[:, -1].numpy()
    parts = {"task": "first-letter", "model": lm.name, "hook": inputs.hook_name, "prefix": PREFIX,
             "ids": [w for w, _ in words]}
    return torch.from_numpy(cached_array(parts, compute, inputs.use_cache))


def _sparse_f1(f_train: torch.Tensor, pos_train: np.ndarray, f_test: torch.Tensor, pos_test: np.ndarray,
               order: np.ndarray) -> list[float]:
    """Test F1 of a binary probe on the top k latents of `order`, for k = 1..len(order)."""
    scores = []
    for k in range(1, len(order) + 1):
        chosen = torch.as_tensor(order[:k])
        probe = fit_logistic(f_train[:, chosen], torch.as_tensor(pos_train).long(), 2, l2=1e-4, standardise=True)
        scores.append(binary_f1(probe.predict(f_test[:, chosen]).numpy() == 1, pos_test))
    return scores


def letter_absorption(encoder: Encoder, x_train: torch.Tensor, y_train: np.ndarray, x_test: torch.Tensor,
                      y_test: np.ndarray, settings: dict) -> dict:
    """Absorption of one encoder on labelled activations (y = letter index 0..25): per-letter rows and means
    (on one thread: hundreds of small probe fits)."""
    with few_threads():
        return _letter_absorption(encoder, x_train, y_train, x_test, y_test, settings)


def _letter_absorption(encoder: Encoder, x_train: torch.Tensor, y_train: np.ndarray, x_test: torch.Tensor,
                       y_test: np.ndarray, settings: dict) -> dict:
    probe = fit_logistic(x_train, torch.as_tensor(y_train), len(LETTERS))
    predicted = probe.predict(x_test).numpy()
    f_train, f_test = encoder.encode(x_train), encoder.encode(x_test)
    unit_dec = encoder.W_dec / encoder.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
    rows: list[dict[str, Any]] = []
    for letter in range(len(LETTERS)):
        pos_train, pos_test = y_train == letter, y_test == letter
        if pos_test.sum() < settings["min_test_words"] or pos_train.sum() < settings["min_test_words"]:
            continue
        diff = (f_train[pos_train].mean(0) - f_train[~pos_train].mean(0)).numpy()
        order = np.argsort(-diff, kind="stable")[:settings["max_k"]]
        f1 = _sparse_f1(f_train, pos_train, f_test, pos_test, order)
        k = 1
        while k < len(f1) and f1[k] - f1[k - 1] > settings["split_gain"]:
            k += 1
        main = torch.as_tensor(order[:k])
        direction = probe.direction(letter)
        cosine = unit_dec @ direction
        along = encoder.W_dec @ direction
        true_pos = np.flatnonzero(pos_test & (predicted == letter))
        misses = absorbed = 0
        for t in true_pos:
            f = f_test[t]
            if bool((f[main] > 0).any()):
                continue
            misses += 1
            active = torch.nonzero(f > 0).flatten()
            contribution = f[active] * along[active]
            total = float(contribution.clamp_min(0).sum())
            outside = ~torch.isin(active, main) & (cosine[active] >= settings["min_cosine"])
            carried = float(contribution[outside].max()) if bool(outside.any()) else 0.0
            if total > 0 and carried >= settings["min_share"] * total:
                absorbed += 1
        n = len(true_pos)
        rows.append({"letter": LETTERS[letter], "test_words": int(pos_test.sum()), "probe_true_positives": n,
                     "main_latents": [int(i) for i in order[:k]], "f1_by_k": f1, "split": k > 1,
                     "absorption_rate": absorbed / n if n else None, "miss_rate": misses / n if n else None})
    rated: list[dict] = [r for r in rows if r["absorption_rate"] is not None]
    return {"rows": rows, "probe_accuracy": float((predicted == y_test).mean()),
            "absorption_rate": float(np.mean([r["absorption_rate"] for r in rated])) if rated else None,
            "miss_rate": float(np.mean([r["miss_rate"] for r in rated])) if rated else None,
            "split_fraction": float(np.mean([r["split"] for r in rows])) if rows else None,
            "main_f1": float(np.mean([r["f1_by_k"][0] for r in rows])) if rows else None}


def absorption_measures(real: dict, control: dict, chance: float, control_name: str) -> list[Measure]:
    """The metric's numbers beside their controls."""
    return [
        Measure("absorption rate", real["absorption_rate"], control["absorption_rate"], control_name, False),
        Measure("main-latent miss rate", real["miss_rate"], control["miss_rate"], control_name, False),
        Measure("letters with a split feature", real["split_fraction"], control["split_fraction"], control_name,
                False),
        Measure("main-latent F1 (k=1)", real["main_f1"], control["main_f1"], control_name, True),
        Measure("first-letter probe accuracy", real["probe_accuracy"], chance, "the majority letter (chance)", True)]


def run(inputs: BenchInputs) -> MetricResult:
    """First-letter absorption of inputs.encoder on the bundled model's tokenizer words."""
    started = time.perf_counter()
    settings = {**DEFAULTS, **inputs.options.get(NAME, {})}
    words = letter_words(inputs.lm.tokenizer, settings["n_words"], inputs.seed)
    if len(words) < MIN_WORDS:
        raise InterpscopeError(f"The tokenizer has {len(words)} single-token word(s) of two or more ASCII letters; "
                               f"absorption needs at least {MIN_WORDS} (one to fit the probe on, one to test it).")
    x = word_activations(inputs, words)
    labels = np.array([LETTERS.index((t[1:] if t.startswith(" ") else t)[0].lower()) for _, t in words])
    order = np.random.default_rng(inputs.seed).permutation(len(words))
    cut = int(settings["train_fraction"] * len(words))
    train, test = order[:cut], order[cut:]
    x_train, x_test = x[torch.as_tensor(train)], x[torch.as_tensor(test)]
    inputs.report(0.65, "absorption: this SAE")
    real = letter_absorption(inputs.encoder, x_train, labels[train], x_test, labels[test], settings)
    density = float((inputs.encoder.encode(x_train) > 0).float().mean())
    control_encoder = random_encoder(x.shape[1], inputs.encoder.d_sae, x_train, density, inputs.seed)
    inputs.report(0.85, "absorption: random SAE control")
    control = letter_absorption(control_encoder, x_train, labels[train], x_test, labels[test], settings)
    chance = float(np.bincount(labels[test], minlength=len(LETTERS)).max() / len(test))
    spaced = sum(t.startswith(" ") for _, t in words)
    control_rows: dict[str, dict] = {r["letter"]: r for r in control["rows"]}
    details = [{**row, "control_absorption_rate": control_rows.get(row["letter"], {}).get("absorption_rate"),
                "control_split": control_rows.get(row["letter"], {}).get("split")} for row in real["rows"]]
    note = fewer_words_note(len(words), settings["n_words"], len(real["rows"]), settings["min_test_words"])
    return MetricResult(NAME, MEANING, absorption_measures(real, control, chance, control_encoder.label),
                        settings={**settings, "words": len(words), "with_leading_space": spaced,
                                  "without_leading_space": len(words) - spaced, "letters_scored": len(real["rows"]),
                                  "prefix": PREFIX, **({"note": note} if note else {})},
                        details=details, seconds=time.perf_counter() - started)
