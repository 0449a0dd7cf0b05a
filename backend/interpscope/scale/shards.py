"""Finished shards on disk: one `.npz` per shard in the job's folder, written atomically (temporary file, then
rename), so a rerun after a killed driver finds exactly the shards that finished and skips them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from interpscope import atomic


class ShardFiles:
    """Shard results of one job in `folder`, one file per shard named by the range [first, stop) it covers
    (arrays only, no pickles), so shards of any size, from any run, tile the job without overlapping."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, first: int, stop: int) -> Path:
        return self.folder / f"shard_{first:08d}_{stop:08d}.npz"

    def intervals(self) -> list[list[int]]:
        """The merged [first, stop) ranges of the finished shards."""
        found = []
        for path in self.folder.glob("shard_*_*.npz") if self.folder.is_dir() else []:
            _, first, stop = path.stem.split("_")
            found.append([int(first), int(stop)])
        return merge_intervals(found)

    def save(self, first: int, stop: int, arrays: dict[str, np.ndarray]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        # numpy's stub types **kwds as if a name could be allow_pickle: bool
        return atomic.write_with(self.path(first, stop),
                                 lambda handle: np.savez(handle, **arrays))  # type: ignore[arg-type]

    def load_all(self) -> list[dict[str, np.ndarray]]:
        """Every finished shard's arrays, in the order of the ranges they cover."""
        paths = sorted(self.folder.glob("shard_*_*.npz"), key=lambda p: int(p.stem.split("_")[1]))
        loaded = []
        for path in paths:
            with np.load(path, allow_pickle=False) as data:
                loaded.append({name: data[name] for name in data.files})
        return loaded

    def remove(self) -> None:
        """Delete the shard files this job wrote (and the folder when nothing else is left in it)."""
        if not self.folder.is_dir():
            return
        for path in [*self.folder.glob("shard_*_*.npz"), *self.folder.glob("*.npz.tmp")]:
            path.unlink(missing_ok=True)
        atomic.remove_stale_temps(self.folder)
        try:
            self.folder.rmdir()
        except OSError:
            pass


def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:
    """Sorted, non-overlapping [first, stop) intervals covering the same items."""
    merged: list[list[int]] = []
    for first, stop in sorted(intervals):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([first, stop])
    return merged


def covered(intervals: list[list[int]], first: int, stop: int) -> bool:
    """Whether [first, stop) lies inside one of the merged intervals."""
    return any(a <= first and stop <= b for a, b in intervals)


def gaps(intervals: list[list[int]], n_items: int) -> list[tuple[int, int]]:
    """The [first, stop) ranges of 0..n_items that the merged intervals do not cover."""
    found, at = [], 0
    for first, stop in intervals:
        if first > at:
            found.append((at, min(first, n_items)))
        at = max(at, stop)
    if at < n_items:
        found.append((at, n_items))
    return found
