"""What is explained: one scalar built from the logits at one position.

A target is the logit of a token, a contrast "A rather than B" (logit difference), or a token against the mean of
all others (docs/methods/attnlrp.md, rule 8, for models whose logits are mostly negative).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from interpscope.config import InterpscopeError
from interpscope.token_text import token_text


@dataclass(frozen=True)
class Target:
    """Explain `logit[token_id]` at `position` (the prediction for the token after it), or a logit difference.

    token / contrast_token: the tokens' text (filled by resolve_target; empty when built from ids alone).
    """

    position: int
    token_id: int
    contrast_id: int | None = None
    vs_rest: bool = False
    token: str = ""
    contrast_token: str | None = None

    __plain_extras__ = ("kind", "label")

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        """The explained value from logits [..., vocab] at `position` (one per leading index)."""
        chosen = logits[..., self.token_id]
        if self.contrast_id is not None:
            return chosen - logits[..., self.contrast_id]
        if self.vs_rest:
            others = (logits.sum(-1) - chosen) / (logits.shape[-1] - 1)
            return chosen - others
        return chosen

    @property
    def kind(self) -> str:
        """What the explained number is: a logit, or a logit difference."""
        if self.contrast_id is not None:
            return "logit difference"
        return "logit minus the mean logit" if self.vs_rest else "logit"

    @property
    def label(self) -> str:
        """How a page or a figure names the target: 'Paris', 'Paris' rather than 'London', ..."""
        name = repr(self.token) if self.token else f"#{self.token_id}"
        if self.contrast_id is not None:
            other = repr(self.contrast_token) if self.contrast_token else f"#{self.contrast_id}"
            return f"{name} rather than {other}"
        return f"{name} against the mean of all others" if self.vs_rest else name

    @property
    def value_label(self) -> str:
        """The readout's name for the explained value: 'Target logit' or 'Logit difference (A rather than B)'."""
        if self.contrast_id is not None:
            return f"Logit difference ({self.label})"
        return "Target logit minus the mean logit" if self.vs_rest else "Target logit"


def token_id_of(tokenizer, token: str | int, vocab_size: int | None = None) -> int:
    """The id of a single token given as an id, '#id', or text that tokenises to exactly one token."""
    if isinstance(token, int) or (isinstance(token, str) and token.startswith("#") and token[1:].isdigit()):
        token_id = int(token if isinstance(token, int) else token[1:])
        if token_id < 0 or (vocab_size is not None and token_id >= vocab_size):
            raise InterpscopeError(f"Token id {token_id} is outside the vocabulary (0..{(vocab_size or 1) - 1}).")
        return token_id
    if not isinstance(token, str) or token == "":
        raise InterpscopeError("The target token is empty: type a token such as ' the'.")
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        pieces = [token_text(tokenizer, i) for i in ids]
        raise InterpscopeError(f"{token!r} is {len(ids)} tokens ({pieces}); pick a single token, e.g. {pieces[0]!r}.")
    return int(ids[0])


def resolve_target(tokenizer, logits_row: torch.Tensor, position: int, token: str | int | None = None,
                   contrast: tuple[str | int, str | int] | None = None, vs_rest: bool = False) -> Target:
    """Build a Target: the predicted token (argmax) unless `token` or a contrast (A, B) is given."""
    if token is None and contrast is None:
        token_id = int(logits_row.argmax())
        return Target(position, token_id, vs_rest=vs_rest, token=token_text(tokenizer, token_id))
    return chosen_target(tokenizer, int(logits_row.shape[-1]), position, token=token, contrast=contrast,
                         vs_rest=vs_rest)


def chosen_target(tokenizer, vocab: int, position: int, token: str | int | None = None,
                  contrast: tuple[str | int, str | int] | None = None, vs_rest: bool = False) -> Target:
    """A target named by the person (a token, or a contrast A rather than B): no logits needed."""
    if contrast is not None:
        first, second = (token_id_of(tokenizer, t, vocab) for t in contrast)
        if first == second:
            raise InterpscopeError("The two contrast tokens are the same token; pick two different ones.")
        return Target(position, first, contrast_id=second, token=token_text(tokenizer, first),
                      contrast_token=token_text(tokenizer, second))
    if token is None:
        raise InterpscopeError("Name a target token or a contrast.")
    token_id = token_id_of(tokenizer, token, vocab)
    return Target(position, token_id, vs_rest=vs_rest, token=token_text(tokenizer, token_id))


class ExplainedValue(Protocol):
    """What the relevance engine explains: a value read from the logits at `position` (a Target), or one read
    inside the same forward pass (an SAE feature's activation, the value ignoring the logits)."""

    @property
    def position(self) -> int: ...

    def value(self, logits: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class PendingTarget:
    """A target decided by the logits of the attribution's own forward pass (the predicted token): the engine
    calls `resolve(logits_row)` once it has the logits at `position`, so no separate pass picks the target."""

    position: int
    resolve: Callable[[torch.Tensor], Target]
