"""The addition task as tensors, for the training scripts of the number models (scripts/train_adder.py,
scripts/train_number_lm.py): encoded splits, the logits at each prompt's answer position, and accuracy."""
from __future__ import annotations

import torch

from interpscope.fourier.data import render, split_pairs

EncodedSplit = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def encode_split(tokenizer, n_numbers: int, split: str, templates: tuple[str, ...]) -> EncodedSplit:
    """Right-padded prompt ids [R, T], attention mask, the index of each prompt's last token, and the answer id."""
    pairs = split_pairs(n_numbers, split)
    texts, answers = [], []
    for template in templates:
        texts += render(template, pairs)
        answers += [int(a + b) for a, b in pairs]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    last = encoded.attention_mask.sum(dim=1) - 1
    answer_ids = torch.tensor([tokenizer.convert_tokens_to_ids(str(s)) for s in answers])
    return encoded.input_ids, encoded.attention_mask, last, answer_ids


def answer_logits(model, ids: torch.Tensor, mask: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Logits [R, vocab] at each prompt's last token."""
    return model(input_ids=ids, attention_mask=mask).logits[torch.arange(len(ids)), last]


@torch.no_grad()
def accuracy(model, data: EncodedSplit, batch: int = 512) -> float:
    """Share of prompts whose top-1 next token is the answer."""
    ids, mask, last, answers = data
    correct = 0
    for start in range(0, len(ids), batch):
        part = slice(start, start + batch)
        correct += int((answer_logits(model, ids[part], mask[part], last[part]).argmax(-1) == answers[part]).sum())
    return correct / max(1, len(ids))
