"""Massive activations for SAEs: a re-export of interpscope.sinks, the one helper every view uses."""
from interpscope.sinks import SINK_FACTOR, sink_rows, zero_sink_features

__all__ = ["SINK_FACTOR", "sink_rows", "zero_sink_features"]
