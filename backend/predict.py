"""Next-token prediction: the top-k distribution after a text, with its tokenisation."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from backend.capture import assert_unedited
from backend.models.loading import LoadedModel


@dataclass
class TokenProb:
    token: str
    id: int
    prob: float
    logit: float


@dataclass
class Prediction:
    model: str
    text: str
    tokens: list[str]
    token_ids: list[int]
    predictions: list[TokenProb]
    entropy: float
    seconds: float

    def tidy(self) -> list[dict]:
        """One row per predicted token (the CSV export)."""
        return [{"rank": rank, "token": p.token, "token_id": p.id, "probability": p.prob, "logit": p.logit,
                 "model": self.model, "text": self.text} for rank, p in enumerate(self.predictions, 1)]


def predict_next(lm: LoadedModel, text: str, top: int = 10) -> Prediction:
    """Top-`top` next-token probabilities after `text`, highest first.

    A plain forward pass: it needs no lock, because every hook on the shared model is scoped to the run that
    registered it (backend.capture); it refuses to run inside this run's own edits, so a cached prediction is
    always of the unedited model."""
    if top < 1:
        raise ValueError("top must be at least 1")
    ids = lm.encode(text)
    assert_unedited(lm.model)
    start = time.perf_counter()
    with torch.no_grad():
        logits = lm.model(input_ids=ids, use_cache=False).logits[0, -1].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    entropy = float(-(probs * log_probs).sum())
    values, indices = probs.topk(min(top, probs.numel()))
    predictions = [TokenProb(token=lm.tokenizer.decode([int(i)]), id=int(i), prob=float(p), logit=float(logits[i]))
                   for p, i in zip(values, indices)]
    return Prediction(model=lm.name, text=text, tokens=lm.token_strings(ids[0]), token_ids=ids[0].tolist(),
                      predictions=predictions, entropy=entropy, seconds=time.perf_counter() - start)
