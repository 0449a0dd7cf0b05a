"""The SAE architectures' public face: the config, the base class and lookups by name.

Each architecture is one module of interpscope.sae.arch that owns its parameters, config fields, defaults, training
extras and folder fields, and is registered in interpscope.sae.arch; nothing here changes when one is
added.
"""
from __future__ import annotations

from interpscope.sae.arch import (
                              Knob,
                              LossTerms,
                              PerFeature,
                              SAEConfig,
                              SparseAutoencoder,
                              architecture_class,
                              build_sae,
                              canonical_architecture,
                              choices_text,
                              registered,
)
from interpscope.sae.arch.base import squared_error

__all__ = ["Knob", "LossTerms", "PerFeature", "SAEConfig", "SparseAutoencoder", "architecture_class", "build_sae",
           "canonical_architecture", "choices_text", "registered", "squared_error"]
