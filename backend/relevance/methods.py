"""The attribution methods the explorer offers, and which model families each one serves.

Pages and the command line list methods from this registry, so a family-specific method (e.g. MambaLRP) appears
for its family by registering a `Method` here; nothing else needs to change.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from backend.adapters import ModelAdapter
from backend.config import InterpscopeError
from backend.relevance.rules import Rule, attnlrp_rules, cplrp_rules

MethodKind = Literal["lrp", "gradient", "captum"]
TRANSFORMER_FAMILIES = ("llama", "gpt2", "gpt_neox")


@dataclass(frozen=True)
class Method:
    """An attribution method. `rules` (LRP kinds) builds the rule set for one model; `families` None = all."""

    name: str
    label: str
    kind: MethodKind
    description: str
    families: tuple[str, ...] | None = None
    rules: Callable[[ModelAdapter], Sequence[Rule]] | None = None

    @property
    def conserves(self) -> bool:
        """Whether the method has a conservation readout (the LRP variants)."""
        return self.kind == "lrp"

    def serves(self, family: str) -> bool:
        return self.families is None or family in self.families


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add (or replace) a method in the registry; returns it."""
    METHODS[method.name] = method
    return method


def methods_for_family(family: str) -> list[Method]:
    """Methods available for a model family, LRP variants first, in registration order."""
    available = [m for m in METHODS.values() if m.serves(family)]
    return sorted(available, key=lambda m: m.kind != "lrp")


def get_method(name: str, family: str | None = None) -> Method:
    """Look a method up by name, with a clear message when unknown or not available for the family."""
    method = METHODS.get((name or "").strip().lower())
    if method is None:
        raise InterpscopeError(f"Unknown method {name!r}. Choose one of: {', '.join(METHODS)}.")
    if family is not None and not method.serves(family):
        usable = ", ".join(m.name for m in methods_for_family(family))
        raise InterpscopeError(f"{method.label} is not available for {family} models. Available: {usable}.")
    return method


register_method(Method("attnlrp", "AttnLRP", "lrp",
                       "LRP for transformers: relevance through attention, softmax kept (Achtibat et al. 2024).",
                       TRANSFORMER_FAMILIES, attnlrp_rules))
register_method(Method("cplrp", "CP-LRP", "lrp",
                       "Conservative propagation: queries, keys and the MLP gate detached; conserves exactly.",
                       TRANSFORMER_FAMILIES, cplrp_rules))
register_method(Method("gradxinput", "Gradient x Input", "gradient",
                       "Plain gradient times input embedding, no rules."))
register_method(Method("ig", "Integrated Gradients", "captum",
                       "captum Integrated Gradients on the token embeddings, zero baseline, 32 steps."))
register_method(Method("occlusion", "Occlusion", "captum",
                       "captum feature ablation: each token's embedding zeroed in turn; the drop in the target."))

# Family-specific methods living in their own packages register themselves on import.
import backend.mamba_lrp.method  # noqa: E402,F401  (MambaLRP for family "mamba")
