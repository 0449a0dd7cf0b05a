"""Relevance maps: AttnLRP / CP-LRP / MambaLRP rules, the one-backward-pass engine, captum baselines, faithfulness.

Importing the package registers the shipped methods (backend/interpscope/relevance/builtin.py) in the methods registry.
"""
from interpscope.relevance import builtin  # noqa: E402,F401  (registers the shipped methods)
from interpscope.relevance.engine import Attribution, Completeness, Conservation, LatentRelevance, attribute
from interpscope.relevance.methods import METHODS, Method, get_method, method_names, methods_for, register_method
from interpscope.relevance.rules import Rule, applied, apply_rules, attnlrp_rules, cplrp_rules
from interpscope.relevance.targets import Target, resolve_target

__all__ = ["METHODS", "Attribution", "Completeness", "Conservation", "LatentRelevance", "Method", "Rule", "Target",
           "applied", "apply_rules", "attnlrp_rules", "attribute", "cplrp_rules", "get_method", "method_names",
           "methods_for", "register_method", "resolve_target"]
