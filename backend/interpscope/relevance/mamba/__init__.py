"""MambaLRP (docs/methods/mamba-lrp.md): a pure-PyTorch Mamba forward with the four fixes, the rule that swaps it into
one model instance, and its readouts (conservation per fix, relevance vs distance)."""
from interpscope.relevance.mamba.forward import FIX_NAMES, Fixes, backbone_forward, mixer_forward, rmsnorm
from interpscope.relevance.mamba.rule import MambaLRPRule, mamba_lrp, mambalrp_rules

__all__ = ["FIX_NAMES", "Fixes", "MambaLRPRule", "backbone_forward", "mamba_lrp", "mambalrp_rules", "mixer_forward",
           "rmsnorm"]
