"""The attribution methods the explorer offers: a registry, and one way to run any of them.

A method is one `Method` registered here: what it needs from a model (capabilities the adapter declares, never a
family name), how it computes an Attribution, and which law its readout checks. Pages and the command line list
methods from this registry and run them through `Method.compute`; adding a method is one module that calls
`register_method` and is imported by backend/relevance/builtin.py (or by the caller's own code).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from interpscope.adapters import ModelAdapter
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.relevance.engine import Attribution
    from interpscope.relevance.rules import Rule

MethodKind = Literal["lrp", "gradient", "perturbation"]
Law = Literal["conservation", "completeness", "none"]
MAX_IG_STEPS = 512
MAX_OCCLUSION_WINDOW = 64


@dataclass(frozen=True)
class MethodOptions:
    """Settings of the baselines: Integrated Gradients' steps and baseline (zero, pad, mean: see
    interpscope.relevance.baselines.BASELINES), occlusion's window (tokens replaced at once) and baseline.
    pad_token_id is filled from the tokenizer by the caller."""

    ig_steps: int = 32
    baseline: str = "zero"
    occlusion_window: int = 1
    pad_token_id: int | None = None

    def checked(self) -> MethodOptions:
        from interpscope.relevance.baselines import BASELINES

        if not isinstance(self.ig_steps, int) or not 1 <= self.ig_steps <= MAX_IG_STEPS:
            raise InterpscopeError(f"IG steps must be an integer from 1 to {MAX_IG_STEPS} (got {self.ig_steps!r}).")
        if self.baseline not in BASELINES:
            raise InterpscopeError(f"Unknown baseline {self.baseline!r}: choose one of {', '.join(BASELINES)}.")
        if not isinstance(self.occlusion_window, int) or not 1 <= self.occlusion_window <= MAX_OCCLUSION_WINDOW:
            raise InterpscopeError(f"The occlusion window must be 1..{MAX_OCCLUSION_WINDOW} tokens "
                                   f"(got {self.occlusion_window!r}).")
        return self


Compute = Callable[..., "Attribution"]  # (adapter, ids, target, latent, options[, progress=]) -> Attribution


@dataclass(frozen=True)
class Method:
    """An attribution method.

    requires: adapter capabilities it needs (ModelAdapter.capabilities). compute(adapter, ids, target, latent,
    options) returns the Attribution (the caller holds the model's lock); the built-in ones also take progress=
    (done, total), which run_method passes only when a caller gave one. rules: the LRP rule set, for callers that
    attribute other scalars through the same rules (SAE features, continuations). law: what the readout checks —
    'conservation' (LRP: relevance sums to the explained value, with bias and softmax shares), 'completeness'
    (Integrated Gradients: relevance sums to f(x) - f(baseline)), or 'none'. through_softmax: the method sends
    relevance through the attention softmaxes, so the readout shows what they drop (AttnLRP; CP-LRP detaches q/k).
    exact_forward: its forward pass gives the model's own logits bit for bit (hooks that change only gradients),
    so the predicted token and the next-token logits can be read off that same pass; False for rules that
    recompute a module another way.
    """

    name: str
    label: str
    kind: MethodKind
    description: str
    requires: frozenset[str]
    compute: Compute
    rules: Callable[[ModelAdapter], Sequence[Rule]] | None = None
    law: Law = "none"
    through_softmax: bool = False  # relevance flows through attention softmaxes, which drop a share (AttnLRP)
    exact_forward: bool = True

    @property
    def conserves(self) -> bool:
        """Whether the method has a conservation readout (the LRP variants)."""
        return self.law == "conservation"

    @property
    def one_backward_pass(self) -> bool:
        """Rules or plain gradients: one forward and one backward pass per explained scalar."""
        return self.kind in ("lrp", "gradient")

    def serves(self, adapter: ModelAdapter) -> bool:
        return self.requires <= adapter.capabilities()

    def missing(self, adapter: ModelAdapter) -> list[str]:
        return sorted(self.requires - adapter.capabilities())


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add (or replace) a method in the registry; returns it."""
    METHODS[method.name] = method
    return method


def methods_for(adapter: ModelAdapter) -> list[Method]:
    """Methods this model can run, LRP variants first, in registration order."""
    available = [m for m in METHODS.values() if m.serves(adapter)]
    return sorted(available, key=lambda m: m.kind != "lrp")


def method_names() -> list[str]:
    """Every registered method's name (the command line's choices)."""
    return list(METHODS)


def get_method(name: str, adapter: ModelAdapter | None = None) -> Method:
    """Look a method up by name, with a clear message when unknown or when the model lacks what it needs."""
    method = METHODS.get((name or "").strip().lower())
    if method is None:
        raise InterpscopeError(f"Unknown method {name!r}. Choose one of: {', '.join(METHODS)}.")
    if adapter is not None and not method.serves(adapter):
        usable = ", ".join(m.name for m in methods_for(adapter))
        raise InterpscopeError(f"{method.label} needs {', '.join(method.missing(adapter))}, which {adapter.family} "
                               f"models do not offer here. Available: {usable}.")
    return method
