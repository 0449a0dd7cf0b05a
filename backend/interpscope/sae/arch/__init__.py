"""The SAE architectures, one module each, in a registry looked up by name or alias (as SAELens registers its
classes). Adding an architecture = one module that subclasses `SparseAutoencoder` + one `register` line below;
the trainer, the folder format, the pipeline, the training page and the command line read everything else from
the class (see interpscope.sae.arch.base for what a class declares).
"""
from __future__ import annotations

from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, SAEConfig, SparseAutoencoder
from interpscope.sae.arch.batchtopk import BatchTopKSAE
from interpscope.sae.arch.gated import GatedSAE
from interpscope.sae.arch.jumprelu import JumpReLUSAE
from interpscope.sae.arch.jumprelu_transcoder import JumpReLUTranscoder
from interpscope.sae.arch.matryoshka import MatryoshkaBatchTopKSAE
from interpscope.sae.arch.registry import (
                                       architecture_class,
                                       build_sae,
                                       canonical_architecture,
                                       choices_text,
                                       register,
                                       registered,
)
from interpscope.sae.arch.standard import StandardSAE
from interpscope.sae.arch.topk import TopKSAE
from interpscope.sae.arch.transcoder import Transcoder

register(StandardSAE)
register(GatedSAE)
register(TopKSAE)
register(JumpReLUSAE)
register(BatchTopKSAE)
register(MatryoshkaBatchTopKSAE)
register(Transcoder)
register(JumpReLUTranscoder)

__all__ = ["Knob", "LossTerms", "PerFeature", "SAEConfig", "SparseAutoencoder", "architecture_class", "build_sae",
           "canonical_architecture", "choices_text", "register", "registered"]
