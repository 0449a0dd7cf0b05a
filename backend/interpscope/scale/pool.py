"""Run a job's shards: here in order, or on Ray workers that each load the model once.

A job is a small picklable object with `run(lm, shard) -> result` (and optionally `setup(lm)`), defined next to
the code it shards, so one function computes a shard in either place. `map_shards` hands every result to the
driver's `on_result(shard, result)`: in shard order in one process, as they finish on Ray. Jobs that write files
save each shard there at once (atomically) and merge in shard order at the end, so a rerun after a killed driver
skips the finished shards, and the merged output is the one a single process writes.

Fault tolerance: workers are Ray actors that restart when their process dies (max_restarts) and re-run the shard
they were working on (max_task_retries); the restarted worker loads the model again.
"""
from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from interpscope.config import InterpscopeError
from interpscope.scale.cluster import connected, plan_workers

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MAX_RESTARTS = 4  # per worker: a worker killed more often than this fails the job
MAX_RETRIES = 4  # per shard
IN_FLIGHT = 2  # shards queued per worker, so a worker never waits for the driver


@dataclass
class Shard:
    """One piece of a job: its index (the merge order), the range [first, stop) it covers, and its inputs."""

    index: int
    first: int
    stop: int
    payload: Any = None


@dataclass
class RunStats:
    """What the last run did: shards computed, worker processes seen (at the start, on results, and each actor's
    process at the end: a restarted actor has a new one), the shards delivered in order (each once per success),
    seconds until the workers had loaded the model (startup), of shard work (summed over workers), of merging in
    the driver, and in all (wall)."""

    shards: int = 0
    workers: int = 0
    worker_pids: list[int] = field(default_factory=list)
    pids_seen: set[int] = field(default_factory=set)
    final_pids: list[int] = field(default_factory=list)
    delivered: list[tuple] = field(default_factory=list)
    startup_seconds: float = 0.0
    compute_seconds: float = 0.0
    merge_seconds: float = 0.0
    wall_seconds: float = 0.0

    def reset(self) -> None:
        self.__dict__.update(RunStats().__dict__)


@dataclass
class Scale:
    """Where a job runs: workers = 1 and no address is this process; otherwise Ray workers (`workers` of them
    on a new local cluster, or on the cluster at `address`). shard_batches: model batches per shard on Ray."""

    workers: int = 1
    address: str | None = None
    shard_batches: int = 4
    stats: RunStats = field(default_factory=RunStats)

    @property
    def on_ray(self) -> bool:
        return self.workers > 1 or bool(self.address)


def on_ray(scale: Scale | None) -> TypeGuard[Scale]:
    return scale is not None and scale.on_ray


def ranges(n_items: int, size: int, done: Callable[[int, int], bool] | None = None) -> list[tuple[int, int]]:
    """[first, stop) ranges of `size` items covering 0..n_items, without those `done(first, stop)` says are."""
    cut = [(first, min(first + size, n_items)) for first in range(0, n_items, max(1, size))]
    return [r for r in cut if done is None or not done(*r)]


def batch_shards(n_items: int, batch_size: int, scale: Scale | None,
                 done: Callable[[int, int], bool] | None = None) -> list[tuple[int, int]]:
    """Shards of whole model batches: the batches (aligned at multiples of batch_size, exactly the batches one
    process runs) not yet done, consecutive ones grouped up to shard_batches per shard on Ray (one per shard
    here). Same batches either way, so the same bits."""
    per = scale.shard_batches if on_ray(scale) else 1
    groups: list[list[int]] = []
    for first, stop in ranges(n_items, batch_size, done):
        if groups and groups[-1][1] == first and (stop - groups[-1][0]) <= per * batch_size:
            groups[-1][1] = stop
        else:
            groups.append([first, stop])
    return [(first, stop) for first, stop in groups]


class Job(Protocol):
    def run(self, lm: LoadedModel, shard: Shard) -> Any: ...


@dataclass(frozen=True)
class ModelRef:
    """How a worker loads the driver's model: load_model(name, device, dtype); `key` (interpscope.models.identity)
    checks that it got the same weights."""

    name: str
    device: str
    dtype: str
    key: str | None = None

    @classmethod
    def of(cls, lm: LoadedModel) -> ModelRef:
        from interpscope.models.identity import model_key

        return cls(name=str(lm.name), device=str(lm.device), dtype=str(lm.dtype).removeprefix("torch."),
                   key=model_key(lm))

    def load(self):
        from interpscope.models import load_model

        lm = load_model(self.name, device=self.device, dtype=self.dtype)
        if self.key is not None:
            from interpscope.models.identity import model_key

            if model_key(lm) != self.key:
                raise InterpscopeError(f"The worker loaded other weights for {self.name!r} than the driver has; "
                                       "run on workers only models every node can load by that name.")
        return lm


class ShardWorker:
    """A Ray actor: loads the model once, then runs the job on the shards it is given. The job comes with each
    shard as a reference to one object in Ray's store, fetched once per worker process."""

    def __init__(self, model: ModelRef, threads: int):
        import torch

        torch.set_num_threads(max(1, int(threads)))
        self.lm = model.load()
        self.job: Job | None = None
        self.job_id: str | None = None

    def ready(self) -> int:
        return os.getpid()

    def run(self, job_box: list, shard: Shard) -> tuple[int, float, Any]:
        import ray

        started = time.perf_counter()
        if self.job_id != job_box[0].hex():
            self.job, self.job_id = ray.get(job_box[0]), job_box[0].hex()
            if hasattr(self.job, "setup"):
                self.job.setup(self.lm)
        assert self.job is not None  # fetched above on this job's first shard
        result = self.job.run(self.lm, shard)
        return os.getpid(), time.perf_counter() - started, result


def map_shards(job: Job, shards: Sequence[Shard], on_result: Callable[[Shard, Any], None], *, lm: LoadedModel | None,
               scale: Scale | None = None, model: ModelRef | None = None) -> RunStats:
    """Run job.run(lm, shard) for every shard and pass each result to on_result(shard, result) in the driver.

    In this process (scale None or one worker): in order, with `lm`. On Ray: workers load `model` (default: the
    driver's `lm` by name), results arrive as shards finish. An exception from on_result (a stop) or a shard
    stops the job; the workers are released either way.
    """
    stats = scale.stats if scale is not None else RunStats()
    stats.reset()
    started = time.perf_counter()
    try:
        if not on_ray(scale):
            if lm is None:
                raise ValueError("map_shards in this process needs the loaded model (lm)")
            if shards and hasattr(job, "setup"):
                job.setup(lm)
            for shard in shards:
                clock = time.perf_counter()
                result = job.run(lm, shard)
                stats.compute_seconds += time.perf_counter() - clock
                _deliver(on_result, shard, result, stats)
            return stats
        if shards:
            if model is None:
                if lm is None:
                    raise ValueError("map_shards on Ray needs the model to load (model) or the driver's lm")
                model = ModelRef.of(lm)
            _on_ray(job, list(shards), on_result, scale, model, stats)
        return stats
    finally:
        stats.wall_seconds = time.perf_counter() - started


def _deliver(on_result, shard: Shard, result, stats: RunStats) -> None:
    clock = time.perf_counter()
    on_result(shard, result)
    stats.merge_seconds += time.perf_counter() - clock
    stats.shards += 1
    stats.delivered.append((shard.index, shard.first, shard.stop))


def _on_ray(job: Job, shards: list[Shard], on_result, scale: Scale, model: ModelRef, stats: RunStats) -> None:
    started = time.perf_counter()
    with connected(scale.workers, scale.address) as ray:
        on_gpu = model.device.startswith("cuda")
        plan = plan_workers(ray, scale.workers, scale.address, on_gpu)
        worker_class = ray.remote(ShardWorker).options(num_cpus=plan.cpus, num_gpus=plan.gpus,
                                                       max_restarts=MAX_RESTARTS, max_task_retries=MAX_RETRIES)
        job_ref = ray.put(job)
        actors = [worker_class.remote(model, plan.threads) for _ in range(min(plan.workers, len(shards)))]
        try:
            stats.workers = len(actors)
            stats.worker_pids = _get(ray, [actor.ready.remote() for actor in actors])
            stats.startup_seconds = time.perf_counter() - started
            queue = deque(shards)
            running: dict = {}

            def submit(actor) -> None:
                shard = queue.popleft()
                running[actor.run.remote([job_ref], shard)] = (shard, actor)

            for _ in range(IN_FLIGHT):
                for actor in actors:
                    if queue:
                        submit(actor)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                shard, actor = running.pop(ready[0])
                pid, seconds, result = _get(ray, ready[0])
                stats.pids_seen.add(pid)
                stats.compute_seconds += seconds
                if queue:
                    submit(actor)
                _deliver(on_result, shard, result, stats)
            stats.final_pids = _get(ray, [actor.ready.remote() for actor in actors])
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)


def _get(ray, refs):
    """ray.get, with a shard's own error (e.g. an InterpscopeError) raised as itself."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        cause = err.as_instanceof_cause()
        if isinstance(cause, InterpscopeError):
            raise InterpscopeError(str(err.cause)) from None
        raise
    except ray.exceptions.ActorDiedError as err:
        raise InterpscopeError(f"A Ray worker died {MAX_RESTARTS + 1} times; the finished shards are kept, run "
                               f"the command again to resume ({err}).") from None
