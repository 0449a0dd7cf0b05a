"""Explanation scoring with a simulator (judge), shared by detection and fuzzing.

A judge reads (explanation, context, or a context with one token marked <<like this>>) and returns a score per query,
higher meaning "this matches the explanation". `lm_judge` asks the bundled instruction-tuned LM (SmolLM2-135M-
Instruct by default) a yes/no question through its chat template and scores log P(yes) - log P(no) over the
answer's first token (Yes/yes/ Yes/ yes against No/no/ No/ no, log-sum-exp of each set). `lexical_judge` is the
project's lexical simulator (interpscope.sae.store.explain.simulate): 1 when the context (detection) or the marked
token (fuzzing) holds a word of the explanation, else 0.

Features: a seeded sample of live, non-dense features of the SAE's feature store with at least SHOWN + n_examples
top contexts. Each one's explanation is the store's (when written and not degenerate) or a lexical one built from
the tokens it fires on in its top SHOWN contexts ("the tokens 'Mr', 'Mrs'"). Its examples are its held-out top
contexts (ranks SHOWN.., never the ones an explanation was written from). The random-explanation control scores the
same examples with the explanation of another sampled feature.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.sae.bench.common import BenchInputs, after_prefix, auroc, median_accuracy
from interpscope.sae.bench.result import Measure
from interpscope.sae.store.explain import SHOWN, WINDOW, simulate
from interpscope.sae.store.explanation_quality import is_degenerate

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MARK_OPEN, MARK_CLOSE = "<<", ">>"
DEFAULTS = {"n_features": 6, "n_examples": 4, "explanations": "store", "dense_threshold": 0.1}
YES, NO = ("Yes", " Yes", "yes", " yes"), ("No", " No", "no", " no")


@dataclass
class Query:
    """One question to a judge. marked is the marked token for fuzzing (the text then holds it <<marked>>)."""

    explanation: str
    text: str
    marked: str | None = None


Judge = Callable[[Sequence[Query]], np.ndarray]


def lexical_judge(queries: Sequence[Query]) -> np.ndarray:
    """The lexical simulator as a judge: a word of the explanation in the context (or in the marked token)."""
    return np.array([float(simulate(q.explanation, q.marked if q.marked is not None else q.text))
                     for q in queries])


SYSTEM = "You judge descriptions of text. Answer Yes or No."


def question_parts(query: Query) -> tuple[str, str]:
    """The yes/no question the LM judge answers, as (head naming the explanation, the rest): every query of one
    explanation shares the head, so its key/value cache is computed once."""
    head = f'A feature of a language model is described as: "{query.explanation}".\n'
    if query.marked is None:
        return head, f'Text: "{query.text}"\nDoes this text contain an example of the description? Yes or No?'
    return head, (f"One token is marked with {MARK_OPEN} and {MARK_CLOSE}.\nText: \"{query.text}\"\n"
                  "Is the marked token an example of the description? Yes or No?")


# A judge model whose tokenizer brings no chat template (Gemma 3 270M's pretrained GGUF) is asked in Gemma's turn
# format, the system text as a first user turn (Gemma has no system role)
TURNS_TEMPLATE = ("{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
                  "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n"
                  "{% endif %}")


def lm_judge(lm: LoadedModel, batch_size: int = 16, progress: Callable[[int, int], None] | None = None) -> Judge:
    """A judge backed by an instruction-tuned LM: log P(yes) - log P(no) of its first answer token. The chat up to
    the explanation runs once per explanation (its cache repeated over a batch); each query's rest is right-padded,
    which no real token attends to (causal attention), and read at its own last token."""
    tokenizer = lm.tokenizer
    yes = sorted({tokenizer.encode(w, add_special_tokens=False)[0] for w in YES})
    no = sorted({tokenizer.encode(w, add_special_tokens=False)[0] for w in NO})
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def split_chat(query: Query) -> tuple[list[int], list[int]]:
        head, rest = question_parts(query)
        template = None if getattr(tokenizer, "chat_template", None) else TURNS_TEMPLATE
        chat = str(tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": head + rest}], tokenize=False,
                                                 add_generation_prompt=True, chat_template=template))
        cut = chat.index(head) + len(head)
        return (tokenizer(chat[:cut], add_special_tokens=False).input_ids,
                tokenizer(chat[cut:], add_special_tokens=False).input_ids)

    @torch.no_grad()
    def judge(queries: Sequence[Query]) -> np.ndarray:
        scores = np.zeros(len(queries))
        groups: dict[tuple[str, bool], list[int]] = {}
        for index, query in enumerate(queries):
            groups.setdefault((query.explanation, query.marked is None), []).append(index)
        done = 0
        with model_lock(lm):
            for members in groups.values():
                parts = [split_chat(queries[i]) for i in members]
                prefix = parts[0][0]
                for first in range(0, len(members), batch_size):
                    chunk = parts[first:first + batch_size]
                    width = max(len(rest) for _, rest in chunk)
                    ids = torch.tensor([rest + [pad] * (width - len(rest)) for _, rest in chunk], device=lm.device)
                    ids, extra, offset = after_prefix(lm, prefix, ids)
                    logits = lm.model(input_ids=ids, **extra).logits.float()
                    ends = torch.tensor([offset + len(rest) - 1 for _, rest in chunk])
                    last = logits[torch.arange(len(chunk)), ends]
                    logp = torch.log_softmax(last, -1)
                    values = (torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1)).cpu().numpy()
                    scores[members[first:first + len(chunk)]] = values
                    done += len(chunk)
                    if progress:
                        progress(done, len(queries))
        return scores
    judge.name = f"{lm.name} yes/no logit difference"  # type: ignore[attr-defined]
    return judge


def context_span(store, seq: int, pos: int) -> tuple[int, int]:
    return max(1, pos - WINDOW), min(int(store.spec["context_size"]), pos + 3)


def context(store, seq: int, pos: int, mark: int | None = None) -> str:
    """The store's text around (seq, pos) as the existing scorer cuts it; token `mark` (absolute) marked."""
    first, last = context_span(store, seq, pos)
    pieces = [store.token_text(int(t)) for t in np.asarray(store.arrays["tokens"][seq, first:last])]
    if mark is not None:
        pieces[mark - first] = f"{MARK_OPEN}{pieces[mark - first]}{MARK_CLOSE}"
    return "".join(pieces).replace("\n", " ")


def lexical_explanation(store, feature: int) -> str:
    """'the tokens 'A', 'B', 'C'': what the feature fires on in its top SHOWN contexts, most frequent first."""
    loc = np.asarray(store.arrays["top_loc"][feature][:SHOWN])
    tokens = [store.token_text(int(store.arrays["tokens"][s, p])).strip() for s, p in loc if s >= 0]
    common = [t for t, _ in Counter(t for t in tokens if t).most_common(3)]
    return "the tokens " + ", ".join(f"'{t}'" for t in common) if common else "no token"


def explanation(store, feature: int, kind: str = "store") -> tuple[str, str]:
    """(explanation, where it came from): the store's written one unless absent or degenerate, else lexical."""
    entry = store.explanations.get(feature) if kind == "store" else None
    if entry and entry.get("explanation") and not is_degenerate(entry["explanation"]):
        return entry["explanation"], f"feature store (written by {entry.get('writer', 'an explainer')})"
    return lexical_explanation(store, feature), "lexical (its top tokens)"


def sample_features(store, settings: dict, seed: int) -> list[int]:
    """A seeded sample of live, non-dense features with enough held-out top contexts."""
    loc = np.asarray(store.arrays["top_loc"])
    enough = (loc[:, :, 0] >= 0).sum(1) >= SHOWN + settings["n_examples"]
    density = np.asarray(store.density)
    candidates = np.flatnonzero(enough & (density > 0) & (density <= settings["dense_threshold"]))
    rng = np.random.default_rng(seed)
    return sorted(int(f) for f in rng.permutation(candidates)[:settings["n_features"]])


def prepared(inputs: BenchInputs) -> dict:
    """The features, their explanations and the random-explanation pairing, shared by detection and fuzzing."""
    if "explanations" in inputs.memo:
        return inputs.memo["explanations"]
    settings = {**DEFAULTS, **inputs.options.get("explanations", {})}
    store = inputs.store
    features = sample_features(store, settings, inputs.seed)
    written = [explanation(store, f, settings["explanations"]) for f in features]
    texts = [w[0] for w in written]
    partner = []
    for i in range(len(features)):  # the next sampled feature whose explanation differs
        j = next((k % len(features) for k in range(i + 1, i + len(features)) if texts[k % len(features)] != texts[i]),
                 None)
        partner.append(j)
    inputs.memo["explanations"] = {"settings": settings, "features": features, "explanations": texts,
                                   "sources": [w[1] for w in written], "partner": partner}
    return inputs.memo["explanations"]


def default_judge(inputs: BenchInputs) -> Judge:
    """The judge given in options['judge'], else the bundled LM (the SAE's own model when it is that LM)."""
    given = inputs.options.get("judge")
    if given is not None:
        return given
    if "judge" not in inputs.memo:
        from interpscope.models import load_model

        judge_lm = inputs.lm if inputs.lm.name == "smollm2-135m" else load_model("smollm2-135m", device="cpu")
        inputs.memo["judge"] = lm_judge(judge_lm)
    return inputs.memo["judge"]


def score_features(judge: Judge, shared: dict, examples: list[tuple[list[Query], list[Query]]],
                   report: Callable[[float, str], None], label: str) -> tuple[list[dict], list[Measure]]:
    """Per feature: AUROC and median-threshold accuracy of the judge with the feature's explanation and with its
    partner's (random) one, on the feature's positive and negative queries; means as measures."""
    rows = []
    for i, (feature, (positives, negatives)) in enumerate(zip(shared["features"], examples, strict=True)):
        report(i / max(len(examples), 1), f"{label}: feature {i + 1}/{len(examples)}")
        partner = shared["partner"][i]
        row = {"feature": feature, "explanation": shared["explanations"][i], "source": shared["sources"][i],
               "positives": len(positives), "negatives": len(negatives)}
        pairs = [("", shared["explanations"][i])]
        if partner is not None:
            row["random_explanation_of"] = shared["features"][partner]
            pairs.append(("random_", shared["explanations"][partner]))
        for prefix, text in pairs:
            queries = [Query(text, q.text, q.marked) for q in positives + negatives]
            scores = judge(queries)
            pos, neg = scores[:len(positives)], scores[len(positives):]
            row[f"{prefix}auroc"] = auroc(pos, neg)
            row[f"{prefix}accuracy"] = median_accuracy(pos, neg)
        rows.append(row)

    return rows, [feature_measure(rows, "AUROC", "auroc"), feature_measure(rows, "accuracy", "accuracy")]


def feature_measure(rows: list[dict], name: str, key: str, seed: int = 0) -> Measure:
    """The mean of a per-feature score beside the random explanation's, each with a seeded 95% percentile-bootstrap
    interval over the scored features (issue 45.14: six features are a small sample, and the number says so)."""
    from interpscope.relevance.heldout_stats import bootstrap_mean

    def summary(column: str) -> tuple[float | None, float | None, float | None]:
        values = [r[column] for r in rows if r.get(column) is not None]
        if not values:
            return None, None, None
        if len(values) < 2:
            return float(values[0]), None, None
        return bootstrap_mean(values, seed=seed)

    value, low, high = summary(key)
    control, control_low, control_high = summary(f"random_{key}")
    n = sum(r.get(key) is not None for r in rows)
    return Measure(name, value, control, "another feature's explanation (random)", True, low=low, high=high,
                   control_low=control_low, control_high=control_high,
                   over=f"{n} feature{'s' if n != 1 else ''}" if low is not None else None)
