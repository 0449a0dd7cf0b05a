"""Next-token prediction: the top-k distribution after a text, with its tokenisation.

The logits after a sequence are a fact of the model and the tokens, the same for every session: they are
computed once per process (only the last position is projected onto the vocabulary) and kept in a small
per-model cache that the relevance maps fill and read too, so the Home page's prediction, the relevance page's
top-10 list and the explained target come from one forward pass.
"""
from __future__ import annotations

import inspect
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from interpscope.capture import assert_unedited, editing
from interpscope.inputs import input_ids_for
from interpscope.results import Result
from interpscope.token_text import token_text

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

CACHE_ROWS = 64


@dataclass
class TokenProb:
    token: str
    id: int
    prob: float
    logit: float


@dataclass
class Prediction(Result):
    """The model's top next tokens after a text (schema interpscope.prediction): the text, the tokens and ids the
    model ran (with `bos_prepended`: whether the model's prefix token was put first, as every view does by
    default), the predictions (token, id, prob, logit; highest first), the entropy of the whole distribution
    (nats)."""

    SCHEMA = "interpscope.prediction"
    SCHEMA_VERSION = 2  # 2: bos_prepended, and the tokens run include the prefix token

    model: str
    text: str
    tokens: list[str]
    token_ids: list[int]
    predictions: list[TokenProb]
    entropy: float
    seconds: float
    bos_prepended: bool = False

    @property
    def title(self) -> str:
        return f"Next token after the text ({self.model}); entropy {self.entropy:.2f} nats"

    def tidy(self) -> list[dict]:
        """One row per predicted token (the CSV export), named as in the JSON document (id, prob)."""
        return [{"rank": rank, "token": p.token, "id": p.id, "prob": p.prob, "logit": p.logit,
                 "model": self.model, "text": self.text} for rank, p in enumerate(self.predictions, 1)]

    def figure(self):
        """The Home page's bar chart of the top next tokens."""
        from interpscope.figures.predict import top_tokens_bar

        return top_tokens_bar([p.token for p in self.predictions], [p.prob for p in self.predictions],
                              title=self.title)


_ROWS: weakref.WeakKeyDictionary[nn.Module, OrderedDict] = weakref.WeakKeyDictionary()
_ROWS_LOCK = threading.Lock()


def _key(model: nn.Module, input_ids: torch.Tensor) -> tuple:
    """(weights version, token ids): any in-place change of a weight bumps the version and retires old rows."""
    version = sum(param._version for param in model.parameters())
    return version, tuple(int(i) for i in input_ids.reshape(-1).tolist())


def cached_next_logits(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor | None:
    """The cached logits [vocab] (float32, CPU) after input_ids [1, T], or None."""
    key = _key(model, input_ids)
    with _ROWS_LOCK:
        rows = _ROWS.get(model)
        if rows is None or key not in rows:
            return None
        rows.move_to_end(key)
        return rows[key]


def remember_next_logits(model: nn.Module, input_ids: torch.Tensor, logits_row: torch.Tensor) -> None:
    """Keep the logits after input_ids [1, T] for every session; ignored when this run edits the model."""
    if editing(model):
        return
    key = _key(model, input_ids)
    row = logits_row.detach().float().cpu()
    with _ROWS_LOCK:
        rows = _ROWS.setdefault(model, OrderedDict())
        rows[key] = row
        rows.move_to_end(key)
        while len(rows) > CACHE_ROWS:
            rows.popitem(last=False)


def forget_next_logits() -> None:
    """Drop every cached logits row (benchmarks measuring cold calls, tests)."""
    with _ROWS_LOCK:
        _ROWS.clear()


def next_logits(model: nn.Module, input_ids: torch.Tensor, fresh: bool = False) -> torch.Tensor:
    """Logits [vocab] (float32, CPU) after input_ids [1, T]: from the cache (unless `fresh`), or one forward pass
    that projects only the last position. Refuses to run under this run's own edits (shared results are clean)."""
    assert_unedited(model)
    cached = None if fresh else cached_next_logits(model, input_ids)
    if cached is not None:
        return cached
    with torch.no_grad():
        if "logits_to_keep" in inspect.signature(model.forward).parameters:
            row = model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
        else:
            row = model(input_ids=input_ids, use_cache=False).logits[0, -1].float()
    remember_next_logits(model, input_ids, row)
    return row.cpu()


def top_predictions(logits_row: torch.Tensor, tokenizer, top: int) -> tuple[list[TokenProb], float]:
    """The `top` most likely next tokens of a logits row [vocab], highest first, and the entropy (nats)."""
    logits = logits_row.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    entropy = float(-(probs * log_probs).sum())
    values, indices = probs.topk(min(top, probs.numel()))
    return [TokenProb(token=token_text(tokenizer, int(i)), id=int(i), prob=float(p), logit=float(logits[i]))
            for p, i in zip(values, indices, strict=True)], entropy


def predict_next(lm: LoadedModel, text: str, top: int = 10, fresh: bool = False,
                 prepend_bos: bool | None = None) -> Prediction:
    """Top-`top` next-token probabilities after `text`, highest first (serves the Home page's prediction and the
    relevance page's top-10 list), on the tokens every view runs (interpscope.inputs.input_ids_for: the model's
    prefix token first unless `prepend_bos` is False).

    A plain forward pass: it needs no lock, because every hook on the shared model is scoped to the run that
    registered it (interpscope.capture); it refuses to run inside this run's own edits, so a cached prediction is
    always of the unedited model. `fresh` recomputes even when the logits are cached (isolation tests)."""
    if top < 1:
        raise ValueError("top must be at least 1")
    prepended = False
    if lm.is_encoder_decoder:  # the text is the encoder's source: nothing is prepended to it
        ids = lm.encode(text)
    else:
        ids, prepended = input_ids_for(lm, text, prepend_bos)
    assert_unedited(lm.model)
    start = time.perf_counter()
    if lm.is_encoder_decoder:  # T5: the text is the source; the prediction is the first decoder token
        start_id = int(getattr(lm.adapter.config, "decoder_start_token_id", 0) or 0)
        with torch.no_grad():
            row = lm.model(input_ids=ids, decoder_input_ids=torch.tensor([[start_id]], device=ids.device),
                           use_cache=False).logits[0, -1]
    else:
        row = next_logits(lm.model, ids, fresh=fresh)
    predictions, entropy = top_predictions(row, lm.tokenizer, top)
    return Prediction(model=lm.name, text=text, tokens=lm.token_strings(ids[0]), token_ids=ids[0].tolist(),
                      predictions=predictions, entropy=entropy, seconds=time.perf_counter() - start,
                      bos_prepended=prepended)
