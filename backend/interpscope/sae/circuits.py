"""Feature circuits: the relevance of a downstream SAE feature (or the next-token logit) propagated by AttnLRP or
CP-LRP through the model with an upstream SAE spliced in, to the upstream SAE's features and to the input tokens.

The splice replaces the activation x at the upstream hook by x_hat + err, where x_hat = decode(encode(x)) and the
error term err = x - x_hat is kept as its own node (detached: its relevance stops there). The forward pass is
unchanged (x_hat + err = x), so the explained value is the clean model's. Relevance of upstream feature i at
position t is f_i(t) x its gradient (the decoder is linear, so this is exact); what the decoder bias takes is
x_hat . grad - sum_i f_i grad_i. Input tokens get what flows back through the SAE's encoder. Conservation of the
spliced pass: value = tokens + model biases + softmax share (AttnLRP) + error node + the upstream SAE's biases
(decoder and encoder) + the downstream SAE's encoder biases (for a feature target), up to a numerical rest.
The positions the SAE prompt view excludes are never spliced: a prepended BOS and the rows the one sink helper
(interpscope.sinks.measure) measures on the splice's own input, never a position by rule (with prepend_bos=False the
first word is spliced unless it is measured to be a sink).

Edges: upstream feature -> target (its relevance, summed over positions), error -> target, token -> target;
and token -> feature for the strongest upstream features, each from one more backward pass with that feature's
activation (at its most relevant position) as the explained value.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import hooks, model_lock
from interpscope.config import InterpscopeError
from interpscope.graph import GraphEdge, GraphNode
from interpscope.relevance.engine import attribute
from interpscope.relevance.methods import get_method
from interpscope.sae.documents import CircuitConservation, CircuitDocument
from interpscope.sae.folder import check_compatible
from interpscope.sae.placement import on_device
from interpscope.sinks import measure

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class FeatureCircuit(CircuitDocument):
    model: str
    method: str
    tokens: list[str]
    target: str
    value: float
    upstream_hook: str
    feature_relevance: np.ndarray = field(repr=False)  # [T, d_sae] of the upstream SAE
    conservation: CircuitConservation | None = None
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    seconds: float = 0.0

    def top_features(self, k: int = 10) -> list[dict]:
        """The upstream features with the largest |relevance| summed over positions."""
        totals = self.feature_relevance.sum(0)
        order = np.argsort(-np.abs(totals), kind="stable")[:k]
        return [{"feature": int(i), "relevance": float(totals[i]),
                 "position": int(np.argmax(np.abs(self.feature_relevance[:, i])))} for i in order if totals[i] != 0]

    def tidy(self) -> list[dict]:
        return [{"source": e.source, "target": e.target, "relevance": e.relevance} for e in self.edges]


class _Explained:
    """A target read inside the forward pass (an SAE feature), or a logit: the engine's Target interface."""

    def __init__(self, position: int, logit_target=None):
        self.position = position
        self.logit_target = logit_target
        self.captured: torch.Tensor | None = None

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        if self.logit_target is not None:
            return self.logit_target.value(logits)
        if self.captured is None:
            raise RuntimeError("the downstream hook did not run")
        return self.captured


def _splice(upstream, found: dict, hook: str = "", prepended: bool = False):
    """The upstream edit: x -> decode(encode(x)) + detached error, the prompt view's excluded positions untouched
    (a BOS prepended at 0 and the sinks measured on x, as interpscope.sae.store.prompt.excluded_at_hook); fills
    `found`."""
    def edit(x: torch.Tensor) -> torch.Tensor:
        rows = x[0].to(upstream.W_enc.dtype)
        keep = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
        keep[measure(rows, prepended=0 if prepended else None, point=hook).positions] = False
        features = upstream.encode(rows) * keep[:, None].to(rows.dtype)
        x_hat = upstream.decode(features)
        error = (rows - x_hat).detach().requires_grad_(True)
        spliced = torch.where(keep[:, None], x_hat + error, rows)
        found.update(input=x, features=features, x_hat=x_hat, error=error, keep=keep)
        return spliced.to(x.dtype)[None]
    return edit


def _run(lm: LoadedModel, upstream, up_hook: str, ids: torch.Tensor, explained: _Explained, rules, read=None,
         found: dict | None = None, prepended: bool = False):
    found = {} if found is None else found
    edits = [(up_hook, _splice(upstream, found, up_hook, prepended))]
    if read is not None:
        edits.append(read)
    with hooks(lm.adapter, edits):
        extra = _LazyExtra(found)
        result = attribute(lm.adapter, ids, explained, rules, extra=extra)
    return result, found


class _LazyExtra(dict):
    """The engine's `extra` dict, filled from the splice's tensors once the forward pass has made them."""

    def __init__(self, found: dict):
        super().__init__()
        self._found = found

    def items(self):
        return [(name, self._found[name]) for name in ("input", "features", "x_hat", "error", "target_input")
                if name in self._found]

    def __iter__(self):
        return iter([name for name, _ in self.items()])

    def __bool__(self) -> bool:
        return True


def feature_circuit(lm: LoadedModel, upstream, downstream=None, text: str = "", *, feature: int | None = None,
                    position: int = -1, method: str = "attnlrp", n_features: int = 8,
                    n_token_edges: int = 4, prepend_bos: bool | None = None) -> FeatureCircuit:
    """The circuit from input tokens through `upstream`'s features to downstream feature `feature` at
    `position` (or, with downstream None, to the next-token logit predicted after `text`); positions as the SAE
    prompt view's (interpscope.relevance.api.input_ids_for with the same prepend_bos: by default the prepended BOS
    is position 0 and the first word 1)."""
    start = time.perf_counter()
    spec = get_method(method, lm.adapter)
    if spec.kind != "lrp" or spec.rules is None:
        raise InterpscopeError(f"Feature circuits propagate with LRP rules (AttnLRP or CP-LRP), not {spec.label}.")
    up_hook = check_compatible(upstream, lm.adapter, None, lm.name)
    upstream = on_device(upstream, lm.device)
    downstream = None if downstream is None else on_device(downstream, lm.device)
    from interpscope.relevance.api import input_ids_for

    ids, prepended = input_ids_for(lm, text, prepend_bos)
    n_tokens = ids.shape[1]
    position = n_tokens + position if position < 0 else position
    if not 0 <= position < n_tokens:
        raise InterpscopeError(f"Position must be 0..{n_tokens - 1} for this text.")
    rules = spec.rules(lm.adapter)
    read = None
    found: dict = {}
    if downstream is not None:
        down_hook = check_compatible(downstream, lm.adapter, None, lm.name)
        if lm.adapter.hook_points().index(down_hook) <= lm.adapter.hook_points().index(up_hook):
            raise InterpscopeError(f"The downstream SAE ({down_hook}) must read after the upstream one ({up_hook}).")
        if feature is None or not 0 <= feature < downstream.cfg.d_sae:
            raise InterpscopeError(f"Pick a downstream feature 0..{downstream.cfg.d_sae - 1}.")
        explained = _Explained(position)

        def capture_feature(x: torch.Tensor) -> None:
            found["target_input"] = x  # what reaches it: the rest the target SAE's own biases take
            explained.captured = downstream.encode(x[0, position].to(downstream.W_enc.dtype)[None])[0, feature]

        read = (down_hook, capture_feature)
        label = f"feature {feature} of {downstream.cfg.hook_name} at token {position}"
    else:
        from interpscope.relevance.api import make_target

        logit_target = make_target(lm, ids)
        explained = _Explained(logit_target.position, logit_target)
        label = f"next-token logit {logit_target.label}"
    with model_lock(lm):
        result, found = _run(lm, upstream, up_hook, ids, explained, rules, read, found, prepended)
        keep = found["keep"].cpu().numpy()
        if read is not None and not keep[position]:
            reason = "the prepended BOS" if prepended and position == 0 else "a measured attention sink"
            raise InterpscopeError(f"Token {position} is {reason}: SAE features there are not read (the prompt view "
                                   f"leaves it out); pick another token.")
        features = result.points["features"]
        x_hat_relevance = float(result.points["x_hat"].sum())
        feature_sum, error_sum = float(features.sum()), float(result.points["error"].sum())
        circuit = FeatureCircuit(model=lm.name, method=spec.label, tokens=lm.token_strings(ids[0]),
                                 target=label, value=result.logit, upstream_hook=up_hook,
                                 feature_relevance=features)
        c = result.conservation
        inputs = float(result.relevance.sum())
        reaching_x = float(result.points["input"][keep].sum())  # what the encoder passes on to the activation
        sae_biases = x_hat_relevance - reaching_x  # the decoder bias and the encoder's biases/thresholds
        # the downstream SAE's encoder biases; a logit target has no downstream SAE (absent, not 0)
        target_biases = (result.logit - float(result.points["target_input"].sum())
                         if "target_input" in result.points else None)
        explained_sum = (inputs + (c.bias_sum or 0.0) + (c.softmax_sum or 0.0) + error_sum + sae_biases
                         + (target_biases or 0.0))
        circuit.conservation = CircuitConservation(
            value=result.logit, input_tokens=inputs, upstream_features=feature_sum, error_node=error_sum,
            sae_biases=sae_biases, target_sae_biases=target_biases, model_biases=c.bias_sum,
            softmax=c.softmax_sum if spec.through_softmax else None,
            relative_error=abs(explained_sum - result.logit) / (abs(result.logit) or 1.0))
        _graph(circuit, result.relevance, features, error_sum, n_features)
        for top in circuit.top_features(n_token_edges):
            _token_edges(lm, upstream, up_hook, ids, rules, top, circuit)
    circuit.seconds = time.perf_counter() - start
    return circuit


def _graph(circuit: FeatureCircuit, input_relevance: np.ndarray, features: np.ndarray, error_sum: float,
           n_features: int) -> None:
    circuit.nodes.append(GraphNode("target", "target", circuit.target, circuit.value))
    for i, (token, value) in enumerate(zip(circuit.tokens, input_relevance, strict=True)):
        circuit.nodes.append(GraphNode(f"t{i}", "token", f"{i}: {token!r}", float(value), position=i))
        circuit.edges.append(GraphEdge(f"t{i}", "target", float(value)))
    circuit.nodes.append(GraphNode("error", "error", "SAE error term", error_sum))
    circuit.edges.append(GraphEdge("error", "target", error_sum))
    for top in circuit.top_features(n_features):
        node = f"f{top['feature']}"
        circuit.nodes.append(GraphNode(node, "feature", f"#{top['feature']}", top["relevance"],
                                       index=top["feature"], position=top["position"]))
        circuit.edges.append(GraphEdge(node, "target", top["relevance"]))
    circuit.edges.sort(key=lambda e: -abs(e.relevance))


def _token_edges(lm: LoadedModel, upstream, up_hook: str, ids: torch.Tensor, rules, top: dict,
                 circuit: FeatureCircuit) -> None:
    """token -> upstream feature edges: one backward pass from the feature's activation at its best position."""
    explained = _Explained(top["position"])
    feature, position = top["feature"], top["position"]

    def read(x: torch.Tensor) -> None:
        explained.captured = upstream.encode(x[0, position].to(upstream.W_enc.dtype)[None])[0, feature]

    with hooks(lm.adapter, [(up_hook, read)], role="read"):
        result = attribute(lm.adapter, ids, explained, rules, conservation=False)
    for i, value in enumerate(result.relevance):
        if abs(value) > 0:
            circuit.edges.append(GraphEdge(f"t{i}", f"f{feature}", float(value)))
    circuit.edges.sort(key=lambda e: -abs(e.relevance))
