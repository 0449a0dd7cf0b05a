"""Sparse autoencoders: four architectures, the common folder format, activation caches, training, evaluation."""
from backend.sae.architectures import (ARCHITECTURES, GatedSAE, JumpReLUSAE, SAEConfig, SparseAutoencoder,
                                       StandardSAE, TopKSAE, build_sae, canonical_architecture)
from backend.sae.folder import check_compatible, load_sae, save_sae

__all__ = ["ARCHITECTURES", "GatedSAE", "JumpReLUSAE", "SAEConfig", "SparseAutoencoder", "StandardSAE", "TopKSAE",
           "build_sae", "canonical_architecture", "check_compatible", "load_sae", "save_sae"]
