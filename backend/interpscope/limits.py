"""Ceilings on the amounts a visitor sets on a shared server: one table, one check, one message.

Outside server mode the pages keep their own bounds (a researcher on their own machine may train for a week). On a
shared server (INTERPSCOPE_SERVER_MODE=1, interpscope.paths.server_mode) every number a page takes from a visitor that
sets how much work runs or how much is written (tokens to cache or train on, widths, steps, prompt counts, rows) is
checked against SERVER_CEILINGS before the work starts, so nobody can start a run that never ends or fills the
disk. The operator can raise or lower one with INTERPSCOPE_LIMIT_<NAME> (e.g. INTERPSCOPE_LIMIT_TRAINING_TOKENS).
"""
from __future__ import annotations

import os

from interpscope.config import InterpscopeError
from interpscope.paths import server_mode

# name -> (what the page calls it, ceiling in server mode); every number input of pages/ that sizes work
SERVER_CEILINGS: dict[str, tuple[str, int]] = {
    "training_tokens": ("training tokens", 10_000_000),
    "cache_tokens": ("corpus tokens to cache", 1_000_000),
    "sae_width": ("SAE width (features)", 65_536),
    "sae_k": ("k (active features)", 4_096),
    "batch_size": ("batch size", 65_536),
    "eval_tokens": ("evaluation tokens", 65_536),
    "store_tokens": ("corpus tokens for a feature store", 262_144),
    "neuron_tokens": ("held-out tokens", 20_000),
    "neuron_store_tokens": ("corpus tokens for neuron contexts", 8_192),
    "random_neurons": ("random neurons", 32),
    "induction_sequences": ("sequences", 64),
    "induction_length": ("tokens before repeating", 256),
    "ig_steps": ("IG steps", 256),
    "occlusion_window": ("occlusion window", 64),
    "file_rows": ("rows of a file", 2_000),
    "batch_prompts": ("prompts in a batch", 200),
    "new_tokens": ("tokens to generate", 32),
    "numbers": ("numbers N", 2_000),
    "fourier_prompts": ("prompts", 5_000),
}


def ceiling(name: str) -> int:
    """The server-mode ceiling of one amount (the operator's INTERPSCOPE_LIMIT_<NAME> if set and valid)."""
    label, default = SERVER_CEILINGS[name]
    raw = os.environ.get(f"INTERPSCOPE_LIMIT_{name.upper()}", "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        value = default
    return value if value > 0 else default


def check_amounts(**amounts: float | int | None) -> None:
    """In server mode, refuse (one line naming the input, its value and the ceiling) any amount above its ceiling;
    a None amount is one that does not apply. Outside server mode nothing is refused here."""
    if not server_mode():
        return
    over = [(name, value) for name, value in amounts.items() if value is not None and value > ceiling(name)]
    if not over:
        return
    asked = " and ".join(f"at most {ceiling(name):,} {SERVER_CEILINGS[name][0]} (asked: {value:,})"
                         for name, value in over)
    raise InterpscopeError(f"This shared server allows {asked} per run; choose "
                           f"{'a smaller number' if len(over) == 1 else 'smaller numbers'}, or ask the server's "
                           f"operator to raise {', '.join(f'INTERPSCOPE_LIMIT_{name.upper()}' for name, _ in over)}.")


def free_bytes(device) -> int:
    """Bytes free for new tensors on `device` (a torch.device): torch.cuda.mem_get_info on CUDA, psutil's available
    RAM elsewhere. Here, beside the other limits, so that the models' memory estimate and scale's batch sizing read
    one figure without either package importing the other."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)
