"""Sparse autoencoders: a registry of architectures, the common folder format, activation caches, training,
evaluation."""
from interpscope.sae.architectures import (
                                       SAEConfig,
                                       SparseAutoencoder,
                                       architecture_class,
                                       build_sae,
                                       canonical_architecture,
                                       registered,
)
from interpscope.sae.folder import check_compatible, load_sae, save_sae

__all__ = ["SAEConfig", "SparseAutoencoder", "architecture_class", "build_sae", "canonical_architecture",
           "check_compatible", "load_sae", "registered", "save_sae"]
