"""What a loaded model is, by content: the key that precomputed stores (neurons, Fourier) are filed under."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def model_key(lm: LoadedModel) -> str:
    """A readable, content-based key for a loaded model: its name plus a hash of a few weights and the dtype."""
    adapter = lm.adapter
    digest = hashlib.sha1(str(lm.dtype).encode())
    parts = [adapter.W_U()[:, :8], adapter.W_E()[:4]]
    if adapter.has_mlp:
        parts.insert(0, adapter.W_out(adapter.n_layers - 1)[:4])
    for tensor in parts:
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(lm.name)).name or str(lm.name))[-40:]
    return f"{name}-{digest.hexdigest()[:12]}"
