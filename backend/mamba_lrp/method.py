"""Registers MambaLRP in the relevance methods registry, so the page and the CLI offer it for Mamba models."""
from __future__ import annotations

from backend.mamba_lrp.rule import mambalrp_rules
from backend.relevance.methods import Method, register_method

MAMBALRP = register_method(Method(
    "mambalrp", "MambaLRP", "lrp",
    "LRP for Mamba: detached RMSNorm normaliser, SiLU identity rule, detached selective-SSM parameters, half rule "
    "on the gate (Rezaei Jafari et al. 2024).",
    ("mamba",), mambalrp_rules))
