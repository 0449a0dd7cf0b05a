"""Batch sizes from free memory: `--batch-size auto` picks how many windows (or prompts) a forward pass takes.

Free memory is torch.cuda.mem_get_info on CUDA and psutil's available RAM elsewhere; half of it is budgeted for
one batch. On a GPU the batch grows up to a cap; on the CPU more windows per call buy little, so auto keeps the
command's usual batch and only lowers it when RAM is short.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from interpscope.limits import free_bytes

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

BUDGET = 0.5  # of free memory, for one batch
GPU_CAP = 512


def window_bytes(adapter, context: int, dtype: torch.dtype, logits: bool = False) -> int:
    """Rough peak bytes of one window of `context` tokens in an inference forward pass: a few residual-width and
    MLP-width tensors per token, eager attention scores, and (logits=True) float32 logits plus the float64
    log-softmaxes an evaluation keeps."""
    item = torch.empty((), dtype=dtype).element_size()
    d_mlp = getattr(adapter, "d_mlp", 4 * adapter.d_model) or 4 * adapter.d_model
    per_token = item * (6 * adapter.d_model + 2 * d_mlp + 2 * adapter.n_heads * context)
    if logits:
        per_token += adapter.vocab_size * (4 + 3 * 8)
    return int(context * per_token)


def auto_batch_size(device: torch.device, item_bytes: int, cpu_default: int, gpu_cap: int = GPU_CAP,
                    free: int | None = None) -> int:
    """Items per batch that fit in BUDGET of the free memory: at most gpu_cap on CUDA, at most cpu_default
    elsewhere, at least 1."""
    free = free_bytes(device) if free is None else free
    fits = int(free * BUDGET // max(1, item_bytes))
    cap = gpu_cap if device.type == "cuda" else cpu_default
    return max(1, min(cap, fits))


def resolve_batch_size(value: int | str, lm: LoadedModel, *, context: int, default: int, logits: bool = False) -> int:
    """A batch-size option: a number as given, or 'auto' from the model's size and the free memory."""
    if value != "auto":
        return int(value)
    return auto_batch_size(lm.device, window_bytes(lm.adapter, context, lm.dtype, logits), default)


def batch_size_arg(text: str) -> int | str:
    """argparse type: a positive whole number or 'auto'."""
    import argparse

    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive or 'auto', got {value}")
    return value
