"""Massive activations for SAEs: a re-export of backend.sinks, the one helper every view uses."""
from backend.sinks import SINK_FACTOR, sink_rows, zero_sink_features

__all__ = ["SINK_FACTOR", "sink_rows", "zero_sink_features"]
