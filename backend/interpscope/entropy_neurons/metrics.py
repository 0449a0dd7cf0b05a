"""Per-token quantities read off logits: loss, entropy, KL to the unigram distribution, and the
frozen-unigram adjustment that undoes a change along the unigram direction."""
from __future__ import annotations

import torch


def loss_and_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the next token and the entropy of the prediction, per position (nats)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    loss = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return loss, entropy


def loss_entropy_kl(logits: torch.Tensor, targets: torch.Tensor, unigram_log_probs: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """loss_and_entropy and kl_to_unigram (when unigram_log_probs is given) from one log-softmax and one exp:
    the same operations as the separate functions, so the same numbers."""
    log_probs = torch.log_softmax(logits, dim=-1)
    loss = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    probs = log_probs.exp()
    entropy = -(probs * log_probs).sum(-1)
    kl = None if unigram_log_probs is None else (probs * (log_probs - unigram_log_probs)).sum(-1)
    return loss, entropy, kl


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The cross-entropy part of loss_and_entropy alone (same operations, same numbers), per position."""
    return -torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_of(logits: torch.Tensor) -> torch.Tensor:
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def kl_to_unigram(logits: torch.Tensor, unigram_log_probs: torch.Tensor) -> torch.Tensor:
    """KL(model || unigram) per position: sum_v p_v (log p_v - log q_v)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return (log_probs.exp() * (log_probs - unigram_log_probs)).sum(-1)


def freeze_unigram(logits: torch.Tensor, clean_logits: torch.Tensor, unit_direction: torch.Tensor) -> torch.Tensor:
    """Logits whose component along the unit unigram direction is reset to the clean logits' component."""
    shift = ((clean_logits - logits) * unit_direction).sum(-1, keepdim=True)
    return logits + shift * unit_direction


def norm_mediated_share(direct: float, total: float, tolerance: float = 1e-12) -> tuple[float | None, str]:
    """1 - |direct| / |total|: the part of a neuron's effect carried by the final norm's scale.

    Only meaningful when |total| >= |direct| and total is not ~0; otherwise None and the reason.
    """
    direct_size, total_size = abs(direct), abs(total)
    if total_size <= tolerance:
        return None, "total effect is ~0"
    if direct_size > total_size:
        return None, "direct effect exceeds total effect"
    return 1.0 - direct_size / total_size, ""
