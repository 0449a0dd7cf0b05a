"""Explanations of SAE features written by a bundled instruction-tuned model, scored by detection.

Writer: the explainer model (default the bundled SmolLM2-135M-Instruct) reads a feature's strongest contexts (top
activations and the top activation intervals, the firing token marked [[like this]]) and answers in a few words
what the feature detects; greedy, batched, first line kept.

Scorer (detection): from the explanation alone, predict which held-out contexts fire. Positives are the feature's
top contexts the writer did not see (ranks top_k//2 .. top_k); negatives are windows of the store's own corpus on
which the feature, encoded live through the model and the SAE, never fires (a pool shared by every feature). The
default simulator is lexical: a context is predicted to fire when it contains a word of the explanation (letters
only, case folded, a word and its inflections alike, stop words ignored). The score is the balanced accuracy
(mean of the hit rates on positives and on negatives; 0.5 is chance). A planted feature whose explanation names its
token scores 1.

Output: explanations.jsonl in the store folder, one JSON object per feature (feature, explanation, score, scorer,
writer, positives, negatives), appended as features finish, so a run resumes; the store's own file.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.outputs import OutputFolder
from interpscope.resume import appending, read_log
from interpscope.sae.store.explanations import EXPLANATIONS_FILE, read_explanations

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

STOP = {"the", "and", "that", "this", "with", "from", "for", "are", "was", "word", "words", "token", "tokens",
        "text", "neuron", "feature", "fires", "detects", "about", "which", "when", "where", "like", "such", "its",
        "their", "phrase", "phrases", "context", "contexts", "related", "used", "uses", "use", "into", "any"}
SHOWN = 10
WINDOW = 6
# The writer's instructions around the contexts (writer_prompt); an answer made of their words alone says nothing.
PROMPT_HEAD = ("Here are snippets of text. In each, one word is marked with [[double brackets]]: a hidden unit of a "
               "language model is active on it.")
PROMPT_TAIL = "What do the marked words have in common? Answer in at most six words."


@dataclass
class ScoredExplanation:
    feature: int
    explanation: str
    score: float | None
    scorer: str
    writer: str
    positives: int
    negatives: int


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3 and w not in STOP}


def _same_word(a: str, b: str) -> bool:
    """One word is the other with an ending ('cat' / 'cats', 'conscious' / 'consciousness')."""
    short, long_ = sorted((a, b), key=len)
    return long_.startswith(short) and len(long_) - len(short) <= max(4, len(short) // 2)


def simulate(explanation: str, context: str) -> bool:
    """The lexical simulator: does the context contain a content word of the explanation (or a form of it)?"""
    wanted, present = _words(explanation), _words(context)
    return any(_same_word(a, b) for a in wanted for b in present)


def balanced_accuracy(explanation: str, positives: Sequence[str], negatives: Sequence[str]) -> float | None:
    """Mean of the hit rate on firing contexts and the rejection rate on non-firing ones (None without both)."""
    if not positives or not negatives:
        return None
    hits = np.mean([simulate(explanation, c) for c in positives])
    rejections = np.mean([not simulate(explanation, c) for c in negatives])
    return float((hits + rejections) / 2)


def _context_text(store, seq: int, pos: int, mark: bool) -> str:
    context = int(store.spec["context_size"])
    first, last = max(1, pos - WINDOW), min(context, pos + 3)
    pieces = [store.token_text(int(t)) for t in np.asarray(store.arrays["tokens"][seq, first:last])]
    if mark:
        pieces[pos - first] = f"[[{pieces[pos - first]}]]"
    return "".join(pieces).replace("\n", " ")


def writer_prompt(store, feature: int) -> str | None:
    """The explainer's question: the feature's strongest contexts (None for a dead feature)."""
    loc = np.asarray(store.arrays["top_loc"][feature])
    shown = [(int(s), int(p)) for s, p in loc[:SHOWN] if s >= 0]
    if not shown:
        return None
    lines = "\n".join(f"{k + 1}. {_context_text(store, s, p, True)}" for k, (s, p) in enumerate(shown))
    return f"{PROMPT_HEAD}\n{lines}\n{PROMPT_TAIL}"


def live_prompt(store, feature: int) -> str:
    """writer_prompt of a feature that fired (the only ones pending() hands out)."""
    prompt = writer_prompt(store, feature)
    if prompt is None:
        raise InterpscopeError(f"Feature {feature} never fired: it has no contexts to explain.")
    return prompt


def held_out_positives(store, feature: int) -> list[str]:
    loc = np.asarray(store.arrays["top_loc"][feature])
    return [_context_text(store, int(s), int(p), False) for s, p in loc[SHOWN:] if s >= 0]


def negative_pool(lm: LoadedModel, sae, store, n_windows: int = 256, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Windows of the store's corpus and, per window, each feature's max activation on it (positions >= 1)."""
    from interpscope.sae.store.encode import encode_ids

    tokens = np.asarray(store.arrays["tokens"])
    rng = np.random.default_rng(seed)
    rows = rng.choice(tokens.shape[0], size=min(n_windows, tokens.shape[0]), replace=False)
    span = WINDOW + 3  # as long as a positive context
    starts = rng.integers(1, max(2, tokens.shape[1] - span), size=len(rows))
    windows = np.stack([tokens[r, s:s + span] for r, s in zip(rows, starts, strict=True)])
    ids = torch.as_tensor(np.concatenate([np.zeros((len(rows), 1), windows.dtype) + tokens[rows, :1], windows], 1),
                          dtype=torch.long)
    peak = encode_ids(lm, sae, ids)[:, 1:].amax(dim=1).numpy()
    texts = ["".join(store.token_text(int(t)) for t in window).replace("\n", " ") for window in windows]
    return texts, peak


def write_explanations(explainer, prompts: list[str], max_new_tokens: int = 12) -> list[str]:
    """The explainer's greedy answers to a batch of prompts (chat template, left padding, first line kept)."""
    tokenizer = explainer.tokenizer
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(explainer.device)
    with torch.no_grad():
        out = explainer.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id)
    answers = tokenizer.batch_decode(out[:, batch.input_ids.shape[1]:], skip_special_tokens=True)
    return [_first_line(a) for a in answers]


def _first_line(answer: str) -> str:
    """The answer's first line, without a list number or quotes the model put around it."""
    line = (answer.strip().splitlines() or [""])[0]
    return re.sub(r"^\s*(\d+[.)]|[-*])\s*", "", line).strip().strip('"').strip()


def model_writer(explainer) -> Callable[[list[str]], list[str]]:
    """A writer (prompts -> answers) backed by a loaded instruction-tuned model."""
    check_explainer(explainer)

    def write(prompts: list[str]) -> list[str]:
        return write_explanations(explainer, prompts)
    write.name = explainer.name  # type: ignore[attr-defined]
    return write


def pending(store, features: Sequence[int] | None) -> tuple[list[int], list[int], dict[int, dict]]:
    """(features wanted, those still to explain: live and not yet in the store, explanations already there)."""
    wanted = list(range(store.d_sae)) if features is None else [store.check_id(int(f)) for f in features]
    fired = np.asarray(store.arrays["fire_count"]) > 0
    done = read_explanations(store.folder)
    return wanted, [f for f in wanted if f not in done and fired[f]], done


def scored_entry(store, feature: int, answer: str, pool: tuple[list[str], np.ndarray], writer_name: str) -> dict:
    """One line of explanations.jsonl: the answer scored by detection against held-out positives and the pool."""
    texts, peak = pool
    positives = held_out_positives(store, feature)
    negatives = [t for t, v in zip(texts, peak[:, feature], strict=True) if v <= 0][:len(positives) or 10]
    entry = ScoredExplanation(feature, answer, balanced_accuracy(answer, positives, negatives),
                              "lexical simulator", writer_name, len(positives), len(negatives))
    return entry.__dict__


def append_entries(append: Callable[[dict], None], entries: list[dict], done: dict[int, dict]) -> None:
    """Append one batch's lines to explanations.jsonl (each written whole, so a stopped run keeps them)."""
    for entry in entries:
        append(entry)
        done[entry["feature"]] = entry


def explain_store(store, writer: Callable[[list[str]], list[str]], pool: tuple[list[str], np.ndarray], *,
                  features: Sequence[int] | None = None, batch_size: int = 16,
                  progress: Callable[[int, int], None] | None = None,
                  should_stop: Callable[[], bool] | None = None) -> dict[int, dict]:
    """Write (with `writer`) and score (against `pool`, see negative_pool) explanations for `features` (default all
    live ones) of `store`, resuming what is done."""
    wanted, todo, done = pending(store, features)
    owned = OutputFolder.claim(store.folder, force=True, command="sae explain")
    path = Path(store.folder) / EXPLANATIONS_FILE
    if not todo:
        return {f: done[f] for f in wanted if f in done}
    writer_name = getattr(writer, "name", "explainer")
    read_log(path)  # a torn last line (a killed run) is cut off before appending
    with appending(path) as handle:
        owned.record(EXPLANATIONS_FILE)
        for start in range(0, len(todo), batch_size):
            if should_stop is not None and should_stop():
                break
            chunk = todo[start:start + batch_size]
            answers = writer([live_prompt(store, f) for f in chunk])
            append_entries(handle, [scored_entry(store, f, a, pool, writer_name)
                                    for f, a in zip(chunk, answers, strict=True)], done)
            if progress:
                progress(min(start + batch_size, len(todo)), len(todo))
    return {f: done[f] for f in wanted if f in done}


def check_explainer(explainer) -> None:
    if getattr(explainer.tokenizer, "chat_template", None) is None:
        raise InterpscopeError(f"{explainer.name} has no chat template: pick an instruction-tuned model as the "
                               "explainer (the bundled smollm2-135m is one).")
