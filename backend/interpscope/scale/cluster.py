"""Reaching Ray: a local cluster on this machine (--workers N) or a running one (--ray-address), and how many
workers it gets, with how many CPU threads and how much of a GPU each.

Ray is imported lazily: the single-process path never needs it, and asking for workers without it installed is a
one-line error naming the extra to install.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from interpscope.config import InterpscopeError

INSTALL_HINT = "pip install -e .[scale]"


def require_ray():
    """The ray module, or a clear error when it is not installed."""
    try:
        import ray
    except ImportError:
        raise InterpscopeError(f"Running on several workers (--workers > 1 or --ray-address) needs Ray, which is "
                               f"not installed here: {INSTALL_HINT}") from None
    return ray


def local_cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextmanager
def connected(workers: int, address: str | None) -> Iterator[Any]:  # the ray module (untyped)
    """Yield the ray module connected to a cluster: the one already connected, the one at `address`, or a new
    local one with `workers` CPUs (shut down on exit; a cluster this call did not start is left running)."""
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        options = dict(log_to_driver=False, configure_logging=False)
        try:
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, **options)
        except ConnectionError as err:
            raise InterpscopeError(f"Cannot join the Ray cluster at {address}: {err}") from None
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


@dataclass(frozen=True)
class WorkerPlan:
    """How many workers, and what each asks Ray for (CPUs, GPU share) and uses (torch threads)."""

    workers: int
    cpus: float
    gpus: float
    threads: int


def plan_workers(ray, workers: int, address: str | None, on_gpu: bool) -> WorkerPlan:
    """A local cluster: `workers` workers of one logical CPU each, the machine's cores split between them as
    torch threads (so N workers never oversubscribe the cores). A joined cluster: `workers` workers (with
    workers = 1: one per GPU on GPU jobs, else one per node), its CPUs split evenly between them."""
    resources = ray.cluster_resources()
    cpus = float(resources.get("CPU", 1.0))
    gpus = float(resources.get("GPU", 0.0)) if on_gpu else 0.0
    if on_gpu and gpus == 0:
        raise InterpscopeError("The model runs on CUDA but the Ray cluster has no GPU; use --device cpu.")
    if not address:
        workers = max(1, min(workers, int(cpus)))  # a cluster already running here may have fewer CPUs
        return WorkerPlan(workers, 1.0, gpus / workers if gpus else 0.0, max(1, local_cores() // workers))
    if workers <= 1:
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        workers = int(gpus) if gpus >= 1 else max(1, nodes)
    elif workers > int(cpus):  # more workers than CPUs would wait forever to be placed: refuse, never shrink
        raise InterpscopeError(f"--workers {workers} is more than the {int(cpus)} CPU(s) of the Ray cluster at "
                               f"{address}; ask for at most {int(cpus)}.")
    workers = max(1, min(workers, int(cpus)))
    share = max(1.0, float(int(cpus // workers)))
    return WorkerPlan(workers, share, gpus / workers if gpus else 0.0, int(share))
