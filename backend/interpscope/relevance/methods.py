"""The attribution methods the explorer offers: a registry, and one way to run any of them.

A method is one `Method` registered here: what it needs from a model (capabilities the adapter declares, never a
family name), how it computes an Attribution, which law its readout checks, and the options it takes (OptionSpecs,
interpscope.relevance.options: the pages' widgets, the links' parameters and the command line's flags are built
from them). Pages and the command line list methods from this registry, by their properties, never by name, and run
them through `Method.compute`; adding a method is one module that calls `register_method` and is imported by
backend/interpscope/relevance/builtin.py (or by the caller's own code).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from interpscope.adapters import ModelAdapter
from interpscope.config import InterpscopeError
from interpscope.relevance.options import MethodOptions, OptionSpec, use_registry

if TYPE_CHECKING:
    from interpscope.relevance.engine import Attribution
    from interpscope.relevance.rules import Rule

MethodKind = Literal["lrp", "gradient", "perturbation"]
Law = Literal["conservation", "completeness", "none"]
# what a method can explain: a decoder's text (token ids), an image classifier's pixels, an encoder-decoder's source
# and decoder input, a mixture of experts' experts (per-expert relevance)
INPUTS = frozenset({"text", "image", "seq2seq", "experts"})
__all__ = ["INPUTS", "METHODS", "ImageVariant", "Method", "MethodOptions", "OptionSpec", "get_method", "method_labels",
           "method_names", "methods_for", "methods_serving", "methods_taking", "option_specs", "register_method",
           "rule_methods"]

Compute = Callable[..., "Attribution"]  # (adapter, ids, target, latent, options[, progress=]) -> Attribution


@dataclass(frozen=True)
class ImageVariant:
    """How a method runs on an image classifier's pixels (interpscope.relevance.image).

    compute(adapter, pixels, target, *, rules, reference, reference_name, ig_steps, progress) -> PixelAttribution,
    with `rules` the method's rule set for that model (None without one) and `reference` the reference image in the
    model's input scale when uses_reference (else None). description: what it does to pixels; label: the image
    page's label when it differs from the method's."""

    description: str
    compute: Callable[..., Any]
    uses_reference: bool = False
    label: str | None = None


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
    recompute a module another way. options: the settings it takes (OptionSpecs; its compute reads their values from
    the MethodOptions it is given); pages, links and the command line offer them. per_token_passes: it runs one
    forward pass per input token (occlusion), so it is slow on long texts and left out of the many-text defaults.
    inputs: what it explains (INPUTS: text, image, seq2seq, experts); every page, command and API call that offers
    methods for an input lists those serving it (methods_serving), so a registered method appears wherever it
    applies. gradient_based: its relevance is plain gradients times inputs (Gradient x Input, Integrated Gradients),
    compared across devices and workers with the gradient tolerance (interpscope.scale.tolerance). image: how it
    runs on pixels, for methods that serve images.
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
    options: tuple[OptionSpec, ...] = ()
    per_token_passes: bool = False
    inputs: frozenset[str] = frozenset({"text"})  # what it explains (INPUTS); "image" needs `image`
    gradient_based: bool = False  # a product of plain autograd gradients, no LRP rules: a looser float tolerance
    image: ImageVariant | None = None

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
    """Add (or replace) a method in the registry; returns it. An option it shares by name with another method must
    be the same spec (one widget, one flag and one URL parameter serve both)."""
    if not method.inputs or not method.inputs <= INPUTS:
        raise ValueError(f"Method {method.name!r} serves {sorted(method.inputs)}; inputs are {sorted(INPUTS)}.")
    if ("image" in method.inputs) != (method.image is not None):
        raise ValueError(f"Method {method.name!r}: a method serves images exactly when it says how (image=...).")
    if "experts" in method.inputs and method.rules is None:
        raise ValueError(f"Method {method.name!r}: per-expert relevance runs LRP rules; it has none.")
    for spec in method.options:
        for other in METHODS.values():
            shared = next((o for o in other.options if o.name == spec.name), None)
            if other.name != method.name and shared is not None and shared != spec:
                raise ValueError(f"Method {method.name!r} declares option {spec.name!r} unlike {other.name!r} does: "
                                 "a shared option must be the same OptionSpec.")
    METHODS[method.name] = method
    return method


def option_specs(methods: Iterable[Method] | None = None) -> dict[str, OptionSpec]:
    """The options of these methods (default: every registered one), each once, by name, in registration order."""
    specs: dict[str, OptionSpec] = {}
    for method in METHODS.values() if methods is None else methods:
        for spec in method.options:
            specs.setdefault(spec.name, spec)
    return specs


use_registry(option_specs)  # MethodOptions reads defaults and checks values against the registered specs


def methods_taking(option: str) -> list[Method]:
    """The registered methods that take option `option`."""
    return [m for m in METHODS.values() if any(spec.name == option for spec in m.options)]


def rule_methods(adapter: ModelAdapter | None = None) -> list[Method]:
    """The methods with an LRP rule set (what SAE feature attribution and feature circuits propagate with), in
    registration order; only those `adapter`'s model can run when given."""
    return [m for m in METHODS.values() if m.rules is not None and (adapter is None or m.serves(adapter))]


def methods_serving(kind: str) -> list[Method]:
    """The registered methods that explain `kind` of input (INPUTS), in registration order."""
    if kind not in INPUTS:
        raise ValueError(f"Unknown input kind {kind!r}; one of {sorted(INPUTS)}.")
    return [m for m in METHODS.values() if kind in m.inputs]


def method_labels(methods: Iterable[Method]) -> dict[str, str]:
    """name -> label, for a widget's format_func."""
    return {m.name: m.label for m in methods}


def methods_for(adapter: ModelAdapter) -> list[Method]:
    """Methods this (decoder) model can run on text, LRP variants first, in registration order."""
    available = [m for m in methods_serving("text") if m.serves(adapter)]
    return sorted(available, key=lambda m: m.kind != "lrp")


def method_names() -> list[str]:
    """Every registered method's name (the command line's choices: text, images and encoder-decoders alike)."""
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


def memory_view(name: str) -> str | None:
    """The view of the memory estimate (interpscope.models.memory.VIEWS) whose tensors a relevance method's run keeps:
    an LRP rule set keeps AttnLRP's, a plain gradient method one backward pass's; None for the rest (perturbation
    methods run forwards only, and are covered by the load check)."""
    from interpscope.models.memory import GRADIENT_VIEW, LRP_VIEW

    spec = METHODS.get(name)
    if spec is None:
        return None
    if spec.rules is not None:
        return LRP_VIEW
    return GRADIENT_VIEW if spec.gradient_based else None
