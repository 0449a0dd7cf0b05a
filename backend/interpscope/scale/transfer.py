"""Device-to-host copies for caches: on CUDA through pinned (page-locked) host memory with non_blocking copies,
so the GPU does not wait for the host; on the CPU a plain conversion (no copy at all where none is needed)."""
from __future__ import annotations

import numpy as np
import torch


class HostCopy:
    """A tensor on its way to host memory; `numpy()` waits for the copy (if any) and returns the array."""

    def __init__(self, tensor: torch.Tensor, event=None):
        self.tensor = tensor
        self.event = event

    def numpy(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.tensor.numpy()


def to_host(tensor: torch.Tensor, dtype: torch.dtype) -> HostCopy:
    """Start copying `tensor` to the host as `dtype`: cast on the device, then a non_blocking copy into pinned
    memory on CUDA. On the CPU it stays float32 and the caller casts with numpy (`astype(..., copy=False)`), as the
    caches always did."""
    if tensor.device.type != "cuda":
        return HostCopy(tensor.detach().float())
    source = tensor.detach().to(dtype)
    pinned = torch.empty(source.shape, dtype=dtype, pin_memory=True)
    pinned.copy_(source, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return HostCopy(pinned, event)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host tensor to `device`: pinned + non_blocking on CUDA, unchanged on the CPU."""
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)
