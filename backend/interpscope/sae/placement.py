"""An SAE on the device of the model it reads: features computed inside a forward or backward pass on a GPU need
the SAE's weights there too (an SAE is loaded on the CPU; its folder says nothing about where it will run)."""
from __future__ import annotations

import copy
import threading
import weakref

import torch

_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def on_device(sae, device: torch.device | str):
    """`sae` itself when its weights are on `device`, else a copy there (made once per SAE and device, kept while
    the SAE lives; the original is never moved, so other sessions using it on the CPU are not affected)."""
    device = torch.device(device)
    here = sae.W_enc.device
    if here.type == device.type and (device.index is None or here.index == device.index):
        return sae
    with _LOCK:
        copies = _COPIES.setdefault(sae, {})
        key = str(device)
        if key not in copies:
            copies[key] = copy.deepcopy(sae).to(device)
        return copies[key]
