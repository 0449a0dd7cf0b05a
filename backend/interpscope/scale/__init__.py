"""Corpus-scale jobs as shards of token ranges: in this process by default, on Ray workers when asked.

Every job (activation caching, feature-store encoding, SAE evaluation, neuron statistics, Fourier filter sweeps,
feature explanations) cuts its work into shards (windows, rows, prompts or features) and runs one function per
shard. In one process the shards run in order; on Ray each worker (an actor) loads the model once and runs the
same function on the shards it is given, and the driver merges the results in shard order, so both ways write
byte-identical outputs. Ray is an optional extra (`pip install -e .[scale]`) imported only when asked for.
"""
from interpscope.scale.pool import RunStats, Scale, Shard, map_shards

__all__ = ["RunStats", "Scale", "Shard", "map_shards"]
