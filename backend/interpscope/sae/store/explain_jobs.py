"""Feature explanations on Ray: the explainer model writes batches of explanations on several workers.

The features still to explain are cut into the batches a single process would generate (batch_size prompts each,
same order, same left padding, so the same greedy answers); workers load the explainer once and answer whole
batches; the driver scores each batch and appends it to explanations.jsonl in batch order (a batch that arrives
early waits for the ones before it). The file is then byte for byte the single-process one, and a run stopped
at any point resumes from the features already written.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from interpscope.config import resolve_device
from interpscope.outputs import OutputFolder
from interpscope.resume import appending, read_log
from interpscope.sae.store.explain import (
    append_entries,
    check_explainer,
    pending,
    scored_entry,
    write_explanations,
    writer_prompt,
)
from interpscope.sae.store.explanations import EXPLANATIONS_FILE
from interpscope.scale.pool import ModelRef, RunStats, Scale, Shard, map_shards


@dataclass
class ExplainJob:
    """What a worker computes for one shard: the explainer's answers to one batch of prompts (and its name)."""

    def setup(self, explainer) -> None:
        check_explainer(explainer)

    def run(self, explainer, shard: Shard) -> tuple[str, list[str]]:
        return str(explainer.name), write_explanations(explainer, shard.payload)


def explain_store_on_ray(store, explainer_name: str, pool: tuple[list[str], np.ndarray], *,
                         features: Sequence[int] | None = None, workers: int = 2, address: str | None = None,
                         batch_size: int = 16, device: str = "auto",
                         progress: Callable[[int, int], None] | None = None,
                         stats: RunStats | None = None) -> dict[int, dict]:
    """explain_store with the explainer `explainer_name` (loaded by each worker on `device`, float32) on
    `workers` local Ray workers, or on the cluster at `address`; same file, same resume."""
    wanted, todo, done = pending(store, features)
    owned = OutputFolder.claim(store.folder, force=True, command="sae explain")
    if not todo:
        return {f: done[f] for f in wanted if f in done}
    batches = [todo[start:start + batch_size] for start in range(0, len(todo), batch_size)]
    shards = [Shard(i, i * batch_size, i * batch_size + len(batch), [writer_prompt(store, f) for f in batch])
              for i, batch in enumerate(batches)]
    model = ModelRef(explainer_name, str(resolve_device(device)), "float32")
    scale = Scale(workers=workers, address=address, stats=stats or RunStats())
    arrived: dict[int, tuple[str, list[str]]] = {}
    written = 0
    read_log(Path(store.folder) / EXPLANATIONS_FILE)  # a torn last line (a killed run) is cut off first
    with appending(Path(store.folder) / EXPLANATIONS_FILE) as handle:
        owned.record(EXPLANATIONS_FILE)

        def collect(shard: Shard, answered: tuple[str, list[str]]) -> None:
            nonlocal written
            arrived[shard.index] = answered
            while written in arrived:
                writer_name, answers = arrived.pop(written)
                append_entries(handle, [scored_entry(store, f, a, pool, writer_name)
                                        for f, a in zip(batches[written], answers, strict=True)], done)
                written += 1
                if progress:
                    progress(min(written * batch_size, len(todo)), len(todo))

        map_shards(ExplainJob(), shards, collect, lm=None if scale.on_ray else model.load(), scale=scale, model=model)
    return {f: done[f] for f in wanted if f in done}
