"""Relevance maps: AttnLRP / CP-LRP rules, the one-backward-pass engine, captum baselines, faithfulness."""
from backend.relevance.engine import Attribution, Conservation, LatentRelevance, attribute
from backend.relevance.methods import METHODS, Method, get_method, methods_for_family, register_method
from backend.relevance.rules import Rule, apply_rules, applied, attnlrp_rules, cplrp_rules
from backend.relevance.targets import Target, resolve_target

__all__ = ["METHODS", "Attribution", "Conservation", "LatentRelevance", "Method", "Rule", "Target", "applied",
           "apply_rules", "attnlrp_rules", "attribute", "cplrp_rules", "get_method", "methods_for_family",
           "register_method", "resolve_target"]
