"""A clean / corrupt prompt pair and the metric read after it: what every patching method compares.

Patching compares the two runs position by position, so the prompts must tokenise to the same length; a pair that
does not is refused with both tokenisations shown. The metric is read from the logits after the last token: the
answer's logit minus the wrong token's (logit-diff, the default), the answer's logit, or its probability. Answers
are single tokens, given as text (tokenised here: a multi-token answer is refused), '#id', or left out (then the
answer is the clean run's top prediction and the wrong token the corrupt run's).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from interpscope.config import InterpscopeError
from interpscope.relevance.targets import token_id_of
from interpscope.token_text import token_text

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

METRICS = ("logit-diff", "logit", "prob")
METRIC_LABELS = {"logit-diff": "logit difference (answer − wrong)", "logit": "answer logit",
                 "prob": "answer probability"}


@dataclass(frozen=True)
class Metric:
    """The number patching restores: read from the logits [..., vocab] after the last token."""

    kind: str
    answer_id: int
    answer: str
    wrong_id: int | None = None
    wrong: str | None = None

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        """The metric for each leading index of logits [..., vocab] (float64 for the comparisons)."""
        logits = logits.double()
        if self.kind == "logit-diff":
            if self.wrong_id is None:
                raise InterpscopeError("The logit-diff metric needs a wrong token.")
            return logits[..., self.answer_id] - logits[..., self.wrong_id]
        if self.kind == "logit":
            return logits[..., self.answer_id]
        return torch.softmax(logits, -1)[..., self.answer_id]

    def columns(self) -> list[int] | None:
        """The vocabulary ids the metric reads (answer, then wrong), or None when it needs every logit (prob)."""
        if self.kind == "prob":
            return None
        return [self.answer_id] if self.wrong_id is None else [self.answer_id, self.wrong_id]

    def on_columns(self) -> Metric:
        """The same metric read from logits that hold only columns() (answer at 0, wrong at 1)."""
        return replace(self, answer_id=0, wrong_id=None if self.wrong_id is None else 1)

    @property
    def label(self) -> str:
        if self.kind == "logit-diff":
            return f"logit({self.answer!r}) − logit({self.wrong!r})"
        return f"{'logit' if self.kind == 'logit' else 'p'}({self.answer!r})"


@dataclass(frozen=True)
class PromptPair:
    """Both prompts' token ids [1, T] (same T), their token strings and whether a BOS was put first."""

    clean_ids: torch.Tensor
    corrupt_ids: torch.Tensor
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    bos_prepended: bool

    @property
    def n_tokens(self) -> int:
        return int(self.clean_ids.shape[1])

    def differing(self) -> list[int]:
        """Positions whose tokens differ between the prompts."""
        return [int(i) for i in torch.nonzero(self.clean_ids[0] != self.corrupt_ids[0]).flatten()]


def _shown(tokens: list[str]) -> str:
    return "[" + ", ".join(repr(t) for t in tokens) + "]"


def prompt_pair(lm: LoadedModel, clean: str, corrupt: str, prepend_bos: bool | None = None) -> PromptPair:
    """Tokenise both prompts (the same BOS choice for both); refuse a pair of different token lengths or two
    identical prompts, saying why."""
    from interpscope.relevance.api import input_ids_for

    clean_ids, prepended = input_ids_for(lm, clean, prepend_bos)
    corrupt_ids, _ = input_ids_for(lm, corrupt, prepended)
    clean_tokens, corrupt_tokens = lm.token_strings(clean_ids[0]), lm.token_strings(corrupt_ids[0])
    if clean_ids.shape[1] != corrupt_ids.shape[1]:
        raise InterpscopeError(
            f"The prompts tokenise to different lengths: clean {clean_ids.shape[1]} tokens {_shown(clean_tokens)}, "
            f"corrupt {corrupt_ids.shape[1]} tokens {_shown(corrupt_tokens)}. Patching swaps activations position by "
            "position, so both prompts must have the same number of tokens: change words that split into a different "
            "number of pieces (e.g. pick names that are one token each).")
    if torch.equal(clean_ids, corrupt_ids):
        raise InterpscopeError("The clean and corrupt prompts are the same tokens: there is nothing to patch. Change "
                               "a word of the corrupt prompt (e.g. a name) so that the answer changes.")
    return PromptPair(clean_ids, corrupt_ids.to(clean_ids.device), clean_tokens, corrupt_tokens, prepended)


def make_metric(lm: LoadedModel, kind: str, clean_logits: torch.Tensor, corrupt_logits: torch.Tensor,
                answer: str | int | None = None, wrong: str | int | None = None) -> Metric:
    """The metric, its tokens resolved: given as text (one token), '#id', or by default the clean run's top
    prediction (answer) and the corrupt run's (wrong)."""
    if kind not in METRICS:
        raise InterpscopeError(f"Unknown metric {kind!r}; choose one of {', '.join(METRICS)}.")
    tokenizer, vocab = lm.tokenizer, int(clean_logits.shape[-1])

    def resolve(token: str | int | None, logits: torch.Tensor, flag: str) -> int:
        if token is None or token == "":
            return int(logits.argmax())
        try:
            return token_id_of(tokenizer, token, vocab)
        except InterpscopeError as err:
            raise InterpscopeError(f"{flag}: {err}") from None

    answer_id = resolve(answer, clean_logits, "The answer")
    wrong_id = None
    if kind == "logit-diff":
        wrong_id = resolve(wrong, corrupt_logits, "The wrong token")
        if wrong_id == answer_id:
            named = "" if wrong not in (None, "") else " (the corrupt prompt's top prediction)"
            same = token_text(tokenizer, answer_id)
            raise InterpscopeError(f"The wrong token{named} is the answer itself, {same!r}: a logit difference needs "
                                   "two different tokens; name the wrong token.")
    return Metric(kind, answer_id, token_text(tokenizer, answer_id), wrong_id,
                  None if wrong_id is None else token_text(tokenizer, wrong_id))
