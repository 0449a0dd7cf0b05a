"""Interventions on an attribution graph: ablate or steer a feature node (or a supernode, a set of them) and compare
the change of the target logit the GRAPH predicts with the ACTUAL change from a real forward pass of the real model.

Predicted: the replacement model is linear once attention patterns and norm scales are frozen and each active
feature is taken as linear in its pre-activation (the graph's own assumption; error nodes are constants). Changing
the features in S by delta_0 (ablation: -a_s; steering by a factor: (factor - 1) a_s) moves every node downstream by
delta = (I - A')^-1 delta_0, A' the graph's adjacency per unit of source activation. `predicted_linear` is that at
the target logit node over the UNPRUNED adjacency of all active features (one batched linear replay of the frozen
run: interpscope.graphs.replay), `predicted_pruned` over the edges the pruned graph keeps.

`predicted` takes the same replay's change of the final residual stream at the last position and puts it through
the LIVE final norm (logit(x + dx) - logit(x), the norm recomputed) instead of its clean scale. Why this is not a
looser check: the final norm is the one nonlinearity after which the graph models nothing. Every node reads the
residual stream before it; only the logit node reads through it, and its input dx is exactly what the graph's
edges say; the frozen scale is needed for the edges (so they sum to the logit) but, for an intervention, it is a
linearisation of a known one-line function of dx, wrong by the factor rms(x) / rms(x + dx) (measured on SmolLM2:
the graph's strongest nodes are last-layer features at the last position, whose dx the graph gets exactly, and
that factor alone put the prediction off by up to 0.35 logits). The norms INSIDE the model stay frozen: their
output feeds features, whose responses are the graph's content (linear edges); recomputing them would be a
simulation of the replacement model, not the graph's prediction.

Actual: one forward pass of the real model with the features' decoder contributions a_s W_dec[s] removed (or
scaled) in `hook_mlp_out` of their block at their position, through interpscope.capture's scoped hooks. Several
interventions run as one batch, each row with its own edit and a clean row beside them (same numerics); only numbers
leave this module, so no edited run's output is cached anywhere.

The ablation check ablates the graph's strongest feature nodes (or supernodes) one by one and reports the Pearson r
of predicted vs actual changes (the issue's target: >= 0.8) beside a CONTROL: the same for random feature nodes.

`predicted_real_linear` is NOT the graph's: the real model's own first-order estimate of the same edit (the target
logit's gradient at hook_mlp_out in one clean forward and backward pass, dotted with the edit), a reference for how
far any linear prediction can go. Where it tracks the real changes and the graph does not, the miss is the
replacement model's (frozen patterns and norm scales, transcoders); where it does not either, the real model
answers non-linearly.

`edge_heads` splits one edge by the attention heads that carry it: with the patterns and norm scales frozen, the
part of s -> t that passes through exactly one head (l, h) is P[l, h, t_pos, s_pos] (s_l[s_pos] gamma_l * v_s) W_V^h
W_O^h . u_t, beside the residual path (same position) and the rest (paths through two or more heads).
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import EditFn
from interpscope.config import InterpscopeError
from interpscope.graphs.dictionary import dictionary
from interpscope.graphs.freeze import check_parts, clean_projections, frozen, readout_parts
from interpscope.graphs.grouping import pick_features
from interpscope.graphs.replay import FrozenRun, attention_forward, record
from interpscope.results import Result

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interpscope.graphs.result import AttributionGraph
    from interpscope.models.loaded import LoadedModel

MODES = ("ablate", "steer")
BATCH = 8  # edited rows per real forward pass (plus one clean row)


def target_node(graph: AttributionGraph) -> str:
    """The id of the graph's target logit node."""
    wanted = graph.target.get("id")
    logits = [n for n in graph.nodes if n.get("kind") == "logit"]
    for node in logits:
        if node.get("feature") == wanted:
            return str(node["id"])
    if len(logits) == 1:
        return str(logits[0]["id"])
    raise InterpscopeError("The graph has no node for its target logit.")


def intervention_factor(mode: str, scale: float | None) -> float:
    """What an intervention multiplies the features' activations by: 0 to ablate, the factor to steer."""
    if mode not in MODES:
        raise InterpscopeError(f"Unknown intervention {mode!r}: choose one of {', '.join(MODES)}.")
    if mode == "ablate":
        return 0.0
    if scale is None or not np.isfinite(scale):
        raise InterpscopeError("Steering needs a finite factor (2 doubles the features, -1 flips them).")
    return float(scale)


def feature_members(graph: AttributionGraph, node_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The graph's feature nodes named by node_ids (a node, or a supernode's members), refusing any other kind."""
    return [dict(n) for n in pick_features(graph.nodes, node_ids, "be ablated or steered")]


def graph_input_ids(lm: LoadedModel, graph: AttributionGraph) -> torch.Tensor:
    """The graph's prompt as the model's token ids [1, T] (tokenised as build_graph does: the model's BOS put first
    where the tokenizer adds none), checked against the graph's own tokens."""
    from interpscope.graphs.defaults import MAX_TOKENS
    from interpscope.relevance.api import input_ids_for

    ids, _ = input_ids_for(lm, graph.text, max_tokens=MAX_TOKENS)
    if ids.shape[1] != len(graph.tokens):
        raise InterpscopeError(f"The graph's prompt tokenises to {ids.shape[1]} tokens here but the graph has "
                               f"{len(graph.tokens)}: it was built with another tokenizer.")
    return ids


# --- the graph's predictions ------------------------------------------------------------------------------------
class PrunedGraph:
    """The pruned graph's edges as a linear map over its nodes, w[t, s] = A[t, s] / a_s for feature sources."""

    def __init__(self, graph: AttributionGraph):
        self.ids = [str(n["id"]) for n in graph.nodes]
        self.index = {node_id: i for i, node_id in enumerate(self.ids)}
        self.activation = np.array([float(n.get("activation") or 0.0) for n in graph.nodes])
        kinds = [n.get("kind") for n in graph.nodes]
        n = len(self.ids)
        W = np.zeros((n, n))
        for edge in graph.edges:
            s, t = self.index.get(str(edge["source"])), self.index.get(str(edge["target"]))
            if s is None or t is None or kinds[s] != "feature" or self.activation[s] == 0:
                continue  # embeddings and errors are constants of the replacement model: never perturbed
            W[t, s] += float(edge["weight"]) / self.activation[s]
        self.system = np.eye(n) - W
        self.target = self.index[target_node(graph)]

    def predicted(self, sources: Sequence[str], factor: float) -> float:
        """The change the pruned graph predicts (a node it pruned away predicts nothing)."""
        start = np.zeros(len(self.ids))
        for node_id in sources:
            i = self.index.get(node_id)
            if i is None:
                continue
            start[i] = (factor - 1.0) * self.activation[i]
        return float(np.linalg.solve(self.system, start)[self.target])


class GraphRun:
    """A built graph made ready for interventions: the frozen run of its prompt (one real forward pass, read hooks
    only), which features are active at every layer and position, and the pruned graph's linear map. Holds no
    edited run's output; a page keeps one per graph in its session, so each intervention costs one real pass."""

    def __init__(self, lm: LoadedModel, transcoders: Any, graph: AttributionGraph):
        from interpscope.capture import model_lock

        if getattr(graph, "convention", "interpscope") != "interpscope":
            raise InterpscopeError(f"Interventions and the ablation check predict the raw logit with every part in a "
                                   f"node (Interpscope's convention); this graph uses {graph.convention!r}'s. Build it "
                                   f"with convention='interpscope' to intervene.")
        self.lm, self.transcoders, self.graph = lm, transcoders, graph
        ids = graph_input_ids(lm, graph)
        with model_lock(lm):
            self.run: FrozenRun = record(lm, ids)
        dtype = self.run.dtype
        # what every source layer reads and writes: one transcoder per block, or a cross-layer transcoder
        self.parts = dictionary(transcoders, dtype)
        self.W_enc = [source.W_enc for source in self.parts.layers]
        self.skips = self.parts.skips  # skip connections' W_skip per block, or None
        with torch.no_grad():
            self.acts = [source.encode(self.run.mlp_in[layer]).to("cpu", dtype)
                         for layer, source in enumerate(self.parts.layers)]
        self.active = [a > 0 for a in self.acts]
        self.target_id = int(graph.target["id"])
        contrast = graph.target.get("contrast")  # a contrastive graph explains logit(target) - logit(contrast)
        self.contrast_id: int | None = None if contrast is None else int(contrast["id"])
        self.pruned = PrunedGraph(graph)
        keeps = "logits_to_keep" in inspect.signature(type(lm.model).forward).parameters
        self._projections: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # for frozen-attention readouts
        self._errors: list[torch.Tensor] | None = None  # the error nodes per layer [T, d], for transcoder readouts
        self._gradients: dict[frozenset[str], list[torch.Tensor]] = {}  # real_gradients, per freeze set
        self.final_eps = lm.adapter.norm_eps(lm.adapter.final_norm())
        self.last_only: dict[str, Any] = {"logits_to_keep": 1} if keeps else {}  # unembed the last position only

    def random_active(self, n: int, avoid: set[str], seed: int) -> list[dict[str, Any]]:
        """n random active features of the prompt (any layer, any position but the graph's sinks, pruned away or
        not) as feature nodes, none of `avoid`: the ablation check's control."""
        from interpscope.graphs.result import node_id

        sinks = {int(s["position"]) for s in self.graph.sinks if "position" in s}
        sinks |= {int(n["position"]) for n in self.graph.nodes if n.get("sink")}
        found = [(layer, int(p), int(f)) for layer, active in enumerate(self.active)
                 for p, f in active.nonzero().tolist() if int(p) not in sinks]
        found = [c for c in found if node_id("feature", c[0], c[1], c[2]) not in avoid]
        picks = np.random.default_rng(seed).choice(len(found), size=min(n, len(found)), replace=False)
        tokens = self.graph.tokens
        return [{"id": node_id("feature", layer, p, f), "kind": "feature", "layer": layer, "position": p,
                 "token": tokens[p], "feature": f, "activation": float(self.acts[layer][p, f])}
                for layer, p, f in (found[int(i)] for i in picks)]

    def active_feature(self, feature_id: str) -> dict[str, Any]:
        """The feature node `F<layer>_<feature>_<position>` of this prompt (in the pruned graph or not) as a member
        for predicted* / actual, with its activation in this run; refused unless it is active here."""
        try:
            layer, feature, position = (int(part) for part in feature_id.removeprefix("F").split("_"))
        except ValueError:
            raise InterpscopeError(f"{feature_id!r} is not a feature node id (F<layer>_<feature>_<position>)."
                                   ) from None
        in_range = 0 <= layer < len(self.acts) and 0 <= position < self.acts[layer].shape[0] \
            and 0 <= feature < self.acts[layer].shape[1]
        if not feature_id.startswith("F") or not in_range or not bool(self.active[layer][position, feature]):
            raise InterpscopeError(f"{feature_id} is not an active feature of this prompt.")
        return {"id": feature_id, "kind": "feature", "layer": layer, "position": position, "feature": feature,
                "token": self.graph.tokens[position], "activation": float(self.acts[layer][position, feature])}

    def predicted(self, interventions: Sequence[Sequence[dict[str, Any]]], factor: float,
                  direct_only: bool = False) -> list[float]:
        """The unpruned graph's predicted change of the target logit per intervention (rows of one batch): the
        linear replay with every active feature following its pre-activation, error nodes constant. direct_only:
        the other features held too (the sources' direct effects: minus their edges into the logit, ablated)."""
        return self.through_final_norm(self.final_delta(interventions, factor, direct_only))

    def predicted_linear(self, interventions: Sequence[Sequence[dict[str, Any]]], factor: float,
                         direct_only: bool = False) -> list[float]:
        """As `predicted`, with the final norm's scale frozen too: the graph's logit node, every path linear (the
        sum of the edges' effects; with direct_only, minus the sources' edges into the logit, ablated)."""
        final = self.final_delta(interventions, factor, direct_only)
        return ((final @ self.read_direction()).double()).tolist()

    def read_direction(self) -> torch.Tensor:
        """The explained value's read at the final residual (frozen final norm): the target's logit direction, or
        its difference to the contrast's."""
        direction = self.run.logit_direction(self.target_id)
        return direction if self.contrast_id is None else direction - self.run.logit_direction(self.contrast_id)

    def explained(self, logits: torch.Tensor) -> torch.Tensor:
        """The explained value from logits [..., vocab]: the target's logit, or its difference to the contrast's."""
        value = logits[..., self.target_id]
        return value if self.contrast_id is None else value - logits[..., self.contrast_id]

    def through_final_norm(self, delta: torch.Tensor) -> list[float]:
        """The target logit's change when the last position's final residual moves by delta [B, d], the final
        norm recomputed (live) rather than frozen: what the module docstring says and why."""
        run = self.run
        x = run.resid_final[-1]
        column = run.W_U[:, self.target_id]
        if self.contrast_id is not None:
            column = column - run.W_U[:, self.contrast_id]
        read = run.gamma_final * column

        def logit(v: torch.Tensor) -> torch.Tensor:
            return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.final_eps)) @ read
        return (logit(x + delta) - logit(x)).double().tolist()

    def final_delta(self, interventions: Sequence[Sequence[dict[str, Any]]], factor: float,
                    direct_only: bool = False, skips: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """The graph's predicted change of the final residual stream at the last position [B, d] (before the final
        norm), per intervention: what `predicted` reads the logit from. A skip transcoder's own W_skip is part of
        the replacement model (a linear path); skips: per layer a further linear map [d, d] from the MLP's normed
        input to its output added to the transcoder's (for probes such as bench/graph_skip_probe.py, not the
        graph's own prediction)."""
        run = self.run
        B, T = len(interventions), run.n_tokens
        dx = torch.zeros(B, T, run.W_E.shape[1], dtype=run.dtype)
        dacts: list[torch.Tensor] = []
        for layer in range(run.n_layers):
            dx = dx + attention_forward(run, layer, dx)
            normed = dx * (run.mlp_scale[layer][:, None] * run.gamma_mlp[layer])
            dact = (normed @ self.W_enc[layer]) * (self.active[layer] & (not direct_only))
            for row, members in enumerate(interventions):
                for node in members:
                    if int(node["layer"]) == layer:
                        dact[row, int(node["position"]), int(node["feature"])] += (factor - 1.0) * float(
                            node["activation"])
            dacts.append(dact)
            for source, W in self.parts.writes_to(layer):  # a CLT: every layer at or below writes here
                dx = dx + dacts[source] @ W
            own_skip = self.skips[layer]
            if own_skip is not None:
                dx = dx + normed @ own_skip
            if skips is not None:
                dx = dx + normed @ skips[layer].to(run.dtype)
        return dx[:, -1]

    def real_gradients(self, freeze: Collection[str] = ()) -> list[torch.Tensor]:
        """Per block, the target logit's gradient with respect to the MLP's output [T, d] (hook_mlp_out, where the
        interventions edit), from one forward and backward pass of the REAL model: a zero tensor is added there
        through scoped hooks and differentiated (no parameter gradient). freeze: parts of the replacement model
        imposed on that pass (interpscope.graphs.freeze), for a diagnostic linearisation. Kept per freeze set; it
        is a clean run's gradient, so no edited run's output is held."""
        from interpscope.capture import capture, hooks

        key = frozenset(freeze)
        if key in self._gradients:
            return self._gradients[key]
        lm = self.lm
        ids = graph_input_ids(lm, self.graph)
        d = self.run.W_E.shape[1]
        zeros = [torch.zeros(1, ids.shape[1], d, dtype=self.run.dtype, requires_grad=True)
                 for _ in range(self.run.n_layers)]
        named: dict[str, EditFn] = {str(self.transcoders.hook_out_name(layer)): _adder(zero)
                                    for layer, zero in enumerate(zeros)}
        with self.freezing(freeze), hooks(lm.adapter, named):  # as in `actual`: the freeze first
            logits = capture(lm.adapter, ids, [], grad=True, **self.last_only).require_logits()
            grads = torch.autograd.grad(self.explained(logits[-1]), zeros, allow_unused=True)
        found = [torch.zeros_like(z[0]) if g is None else g[0].detach() for z, g in zip(zeros, grads, strict=True)]
        self._gradients[key] = found
        return found

    def predicted_real_linear(self, interventions: Sequence[Sequence[dict[str, Any]]], factor: float,
                              freeze: Collection[str] = ()) -> list[float]:
        """The real model's own first-order estimate of each intervention's change of the target logit (attribution
        patching: the gradient at hook_mlp_out dotted with the edit (factor - 1) a W_dec[f], summed over members),
        through the live attention, norms and MLPs. NOT the graph's prediction: a reference for how far any
        linear prediction of these interventions can go on this prompt. freeze: the same estimate for the real
        model with parts of the replacement model imposed (a diagnostic)."""
        grads = self.real_gradients(freeze)
        return [sum((factor - 1.0) * float(node["activation"]) * float(
            W[int(node["feature"])].double() @ grads[target][int(node["position"])].double())
            for node in members for target, W in self.parts.layers[int(node["layer"])].writes)
            for members in interventions]

    def freezing(self, parts: Collection[str]) -> AbstractContextManager[None]:
        """The real model with `parts` of the replacement model's assumptions imposed (interpscope.graphs.freeze),
        for a diagnostic readout; the clean query/key outputs and error nodes it needs are made on first use."""
        check_parts(parts)
        if "attention" in parts and self._projections is None:
            self._projections = clean_projections(self.lm, graph_input_ids(self.lm, self.graph))
        if "mlps" in parts and self._errors is None:
            self._errors = [self.run.mlp_out[t] - self.parts.written(t, self.acts, self.run.mlp_in[t])
                            for t in range(self.run.n_layers)]
        return frozen(self.lm, self.run, parts, errors=self._errors, dictionary=self.parts,
                      projections=self._projections)

    def actual(self, interventions: Sequence[Sequence[dict[str, Any]]], factor: float,
               progress: Callable[[int, int], None] | None = None, freeze: Collection[str] = ()
               ) -> tuple[list[float], float]:
        """The target logit's change in real forward passes, one row per intervention (the features' decoder
        contributions a W_dec[f] multiplied by `factor` in hook_mlp_out at their layer and position). Returns
        (changes, the clean logit of the same batches). freeze: parts of the replacement model imposed on the
        passes (a labelled diagnostic readout, interpscope.graphs.freeze; the clean row is run under them too)."""
        from interpscope.capture import capture, hooks

        lm, transcoders = self.lm, self.transcoders
        ids = graph_input_ids(lm, self.graph)
        changes: list[float] = []
        clean = float("nan")
        chunks = [list(interventions[i:i + BATCH]) for i in range(0, len(interventions), BATCH)]
        for done, chunk in enumerate(chunks):
            rows = len(chunk) + 1  # row 0: the clean run
            edits: dict[int, torch.Tensor] = {}
            for row, members in enumerate(chunk, start=1):
                for node in members:  # a CLT feature writes to its own block and every later one
                    for layer, W in self.parts.layers[int(node["layer"])].writes:
                        write = float(node["activation"]) * W[int(node["feature"])]
                        if layer not in edits:
                            edits[layer] = torch.zeros(rows, ids.shape[1], write.shape[0], dtype=write.dtype)
                        edits[layer][row, int(node["position"])] += (factor - 1.0) * write
            named: dict[str, EditFn] = {str(transcoders.hook_out_name(layer)): _adder(delta)
                                        for layer, delta in edits.items()}
            with self.freezing(freeze), hooks(lm.adapter, named):  # the freeze first: edits act on its output
                logits = capture(lm.adapter, ids.expand(rows, -1), [], **self.last_only).require_logits()
            values = self.explained(logits[:, -1]).double()
            clean = float(values[0])
            changes += [float(v - values[0]) for v in values[1:]]
            if progress is not None:
                progress(done + 1, len(chunks))
        return changes, clean


def _adder(delta: torch.Tensor) -> EditFn:
    return lambda out: out + delta.to(device=out.device, dtype=out.dtype)


# --- results ---------------------------------------------------------------------------------------------------
@dataclass
class InterventionResult(Result):
    """One intervention on a graph's feature node or supernode: the target logit's change as the graph predicts it
    (`predicted`: the unpruned graph, all linear paths; `predicted_pruned`: only the edges the pruned graph keeps)
    beside the actual change from a real forward pass. `factor`: what the features' activations were multiplied by
    (0 for an ablation). `predicted` puts the graph's change of the final residual through the live final norm;
    `predicted_linear` is the graph's logit node with that norm's scale frozen as well (module docstring)."""

    model: str
    text: str
    target: dict[str, Any]
    mode: str
    factor: float
    nodes: list[str]
    label: str
    clean_logit: float
    predicted: float
    predicted_pruned: float
    actual: float
    predicted_linear: float | None = None
    seconds: float = 0.0
    predicted_real_linear: float | None = None

    SCHEMA = "interpscope.graph.intervention"
    # 2: `predicted` through the live final norm, the all-linear one as predicted_linear. 3: predicted_real_linear,
    # the real model's own first-order estimate (GraphRun.predicted_real_linear; not the graph's)
    SCHEMA_VERSION = 3

    @property
    def error(self) -> float:
        return self.actual - self.predicted

    def tidy(self) -> list[dict[str, Any]]:
        """One row: what was changed, the graph's predictions and the actual change of the target logit."""
        return [{"label": self.label, "mode": self.mode, "factor": self.factor, "nodes": " ".join(self.nodes),
                 "target": self.target.get("token"), "clean_logit": self.clean_logit, "predicted": self.predicted,
                 "predicted_pruned": self.predicted_pruned, "predicted_linear": self.predicted_linear,
                 "predicted_real_linear": self.predicted_real_linear, "actual": self.actual, "error": self.error}]

    def figure(self):
        """The page's bars: predicted (all paths, the pruned graph's edges, the real model's first-order estimate)
        beside the actual change (interpscope.figures.graphs.intervention_figure)."""
        from interpscope.figures.graphs import intervention_figure

        return intervention_figure([self])

    def summary(self) -> str:
        """One sentence from the numbers: how far the graph's prediction is from the real change."""
        what = "Ablating" if self.mode == "ablate" else f"Steering ×{self.factor:g}"
        gap = abs(self.error)
        scale = max(abs(self.actual), abs(self.predicted), 1e-9)
        if gap <= 0.1 * scale:
            verdict = "the graph predicts it within 10%"
        elif np.sign(self.actual) == np.sign(self.predicted):
            verdict = f"the graph gets the sign right but is off by {gap / scale:.0%}"
        else:
            verdict = "the graph gets even the sign wrong"
        return (f"{what} {self.label} moves the {self.target.get('token', 'target')!r} logit by {self.actual:+.3f} in "
                f"the real model; the graph predicts {self.predicted:+.3f} ({self.predicted_pruned:+.3f} from the "
                f"pruned graph's edges alone" + (f", {self.predicted_linear:+.3f} with the final norm's scale frozen"
                                                 if self.predicted_linear is not None else "") + f"): {verdict}."
                + (f" The real model's own first-order estimate (its gradient times the edit, not the graph) is "
                   f"{self.predicted_real_linear:+.3f}." if self.predicted_real_linear is not None else ""))


def node_label(members: Sequence[dict[str, Any]]) -> str:
    if len(members) == 1:
        node = members[0]
        return f"L{node['layer']}#{node['feature']}@{node['position']} ({node.get('token', '')!r})"
    return f"a supernode of {len(members)} features"


def intervene(lm: LoadedModel, transcoders: Any, graph: AttributionGraph, node_ids: Sequence[str],
              mode: str = "ablate", scale: float | None = None, label: str | None = None,
              prepared: GraphRun | None = None,
              progress: Callable[[float, str], None] | None = None) -> InterventionResult:
    """Ablate (mode "ablate") or scale by `scale` (mode "steer") the feature nodes node_ids (one node or a
    supernode's members) and compare the graph's predicted change of the target logit with the real one.
    `prepared`: the graph's GraphRun, when the caller keeps one (else it is made here: one more forward pass).
    progress(fraction, stage) before each of its steps (a page's bar and Stop)."""
    start = time.perf_counter()
    report = progress or (lambda fraction, stage: None)
    factor = intervention_factor(mode, scale)
    members = feature_members(graph, node_ids)
    if prepared is None:
        report(0.0, "freezing the prompt's run")
        prepared = GraphRun(lm, transcoders, graph)
    report(0.0, "the graph's prediction")  # fractions: the steps' shares of the time, measured on SmolLM2
    (predicted,) = prepared.predicted([members], factor)
    report(0.05, "the graph's prediction, final norm frozen")
    (linear,) = prepared.predicted_linear([members], factor)
    report(0.1, "the real model's gradient")
    (real_linear,) = prepared.predicted_real_linear([members], factor)
    report(0.6, "the pruned graph's edges")
    pruned = prepared.pruned.predicted([str(n["id"]) for n in members], factor)
    report(0.6, "the real forward pass")
    (actual,), clean = prepared.actual([members], factor)
    report(1.0, "done")
    return InterventionResult(model=graph.model, text=graph.text, target=dict(graph.target), mode=mode,
                              factor=factor, nodes=[str(n["id"]) for n in members],
                              label=label or node_label(members), clean_logit=clean, predicted=predicted,
                              predicted_pruned=pruned, actual=actual, predicted_linear=linear,
                              predicted_real_linear=real_linear,
                              seconds=time.perf_counter() - start)


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson r, or None (absent) when either side has no spread or there are fewer than 3 points."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


@dataclass
class AblationCheck(Result):
    """The graph's strongest feature nodes (or given supernodes) ablated one by one: predicted vs actual change of
    the target logit and their Pearson r (the issue's target >= 0.8; r_pruned: the pruned graph's predictions), and
    the same for random active features of the prompt, in the pruned graph or not (the control). rows: {set
    ("strongest" | "random"), nodes, label, influence (absent for a control feature the graph pruned away),
    predicted, predicted_linear, predicted_pruned, actual, and with diagnostic readouts `readouts`: {name: change}}.
    r_linear: the strongest's r with the final norm's scale frozen too (the graph's logit node, all paths linear).
    Sinks are never ranked: sinks_left_out names them.

    A row whose nodes are all features of the LAST block carries `last_layer: true`: after them come only the final
    norm and the unembedding, which the prediction runs live, so it matches the real change by construction (up to
    float rounding). n_last_layer counts such rows among the strongest; r_beyond_last_layer is r over the other
    strongest rows (absent with fewer than 3), so a reader sees how much of r such rows make.

    predicted_real_linear / r_real_linear (r_real_linear_control over the control rows): the REAL model's own
    first-order estimate of each ablation (attribution patching: the target logit's gradient at hook_mlp_out in a
    clean pass dotted with the removed write), through the live attention, norms and MLPs. It is not the graph's
    prediction; it says how far a linear prediction of these ablations can go on this prompt at all, so a reader
    can tell a graph that misses what a linear estimate gets (the replacement model's frozen parts and transcoders)
    from ablations the real model answers non-linearly (where no linear graph can follow).

    predicted_frozen_linear / r_frozen_linear: the same first-order estimate of the real model under the graph's own
    frozen convention (attention patterns and every norm scale fixed at the clean run's, as circuit-tracer freezes
    them) with its REAL MLPs: the ceiling any transcoder set could reach under that convention (a graph whose
    transcoders were the MLPs themselves would predict this). The graph's r is read against it.

    r_readouts (present only when asked for): the r of the same predictions against DIAGNOSTIC readouts, the real
    model with parts of the replacement model's assumptions imposed (interpscope.graphs.freeze.READOUTS, e.g.
    "attention_norms_frozen", circuit-tracer's convention): where the prediction's error comes from (a readout
    that freezes the final norm is compared with predicted_linear, which assumes the same). They are labelled as
    such beside r, the real forward pass's, and never replace it."""

    model: str
    text: str
    target: dict[str, Any]
    n: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    r: float | None = None
    r_pruned: float | None = None
    r_control: float | None = None
    target_r: float = 0.8
    sinks_left_out: list[str] = field(default_factory=list)
    seed: int = 0
    r_linear: float | None = None
    r_readouts: dict[str, float | None] | None = None
    r_readouts_control: dict[str, float | None] | None = None
    seconds: float = 0.0
    n_last_layer: int = 0
    r_beyond_last_layer: float | None = None
    r_real_linear: float | None = None
    r_real_linear_control: float | None = None
    r_frozen_linear: float | None = None

    SCHEMA = "interpscope.graph.ablation_check"
    # 2: predicted through the live final norm; predicted_linear and r_linear beside it. 3: the real model's own
    # first-order estimate per row (predicted_real_linear) and its r (r_real_linear, r_real_linear_control). 4: the
    # same estimate under the graph's frozen convention with the real MLPs (predicted_frozen_linear, r_frozen_linear)
    SCHEMA_VERSION = 4

    def tidy(self) -> list[dict[str, Any]]:
        """One flat row per ablation (a diagnostic readout as a column `readout: <name>`)."""
        flat = []
        for row in self.rows:
            readouts = row.get("readouts") or {}
            plain = {key: value for key, value in row.items() if key != "readouts"}
            flat.append({**plain, "nodes": " ".join(row["nodes"]),
                         **{f"readout: {name}": value for name, value in readouts.items()}})
        return flat

    def summary(self) -> str:
        def said(r: float | None) -> str:
            return "undefined (no spread)" if r is None else f"{r:.2f}"
        strongest = [row for row in self.rows if row["set"] == "strongest"]
        met = self.r is not None and self.r >= self.target_r
        return (f"Over the {len(strongest)} strongest ablations the graph's predicted logit changes correlate with the "
                f"real ones at r = {said(self.r)} ({'meets' if met else 'misses'} the target {self.target_r}; the "
                f"pruned graph's edges alone: r = {said(self.r_pruned)}; all linear, the final norm's scale frozen "
                f"too: r = {said(self.r_linear)}); over {len(self.rows) - len(strongest)} "
                f"random active features (the control) r = {said(self.r_control)}." + self._last_layer_said(said)
                + self._frozen_said(said) + self._real_linear_said(said) + self._readouts_said(said))

    def _frozen_said(self, said: Callable[[float | None], str]) -> str:
        """The ceiling under the graph's frozen convention beside the graph's r, compared from the numbers."""
        if self.r_frozen_linear is None:
            return ""
        text = (f" Under the graph's own convention (patterns and norm scales frozen) the real model with its real "
                f"MLPs reaches r = {said(self.r_frozen_linear)}: the ceiling for any transcoders")
        if self.r is None:
            return text + "."
        gap = self.r_frozen_linear - self.r
        return text + (f"; the graph is {abs(gap):.2f} {'below' if gap > 0 else 'above'} it.")

    def _real_linear_said(self, said: Callable[[float | None], str]) -> str:
        """The real model's first-order estimate beside the graph's r, and what the pair says (from the numbers)."""
        if self.r_real_linear is None and self.r_real_linear_control is None:
            return ""
        text = (f" The real model's own first-order estimate (its gradient times the removed write, not the graph) "
                f"reaches r = {said(self.r_real_linear)} on the strongest "
                f"(control: {said(self.r_real_linear_control)})")
        if self.r_real_linear is None or self.r is None:
            return text + "."
        if self.r_real_linear >= self.target_r > self.r:
            return text + (": these ablations are close to linear in the real model, so the graph's miss is its own "
                           "(frozen attention patterns and norm scales, transcoders in place of the MLPs).")
        if self.r_real_linear < self.target_r <= self.r:
            return text + (": here the graph's prediction, which runs the final norm live, does better than the real "
                           "model's own first-order estimate.")
        if self.r_real_linear < self.target_r:
            return text + (": the real model answers these ablations non-linearly, so no linear prediction, the "
                           "graph's included, can be expected to track them all.")
        return text + "."

    def _last_layer_said(self, said: Callable[[float | None], str]) -> str:
        if not self.n_last_layer:
            return ""
        strongest = sum(row["set"] == "strongest" for row in self.rows)
        rest = strongest - self.n_last_layer
        beyond = f"over the other {rest}, r = {said(self.r_beyond_last_layer)}" if rest >= 3 else (
            f"the other {rest} are too few for an r" if rest else "none is left to test the graph beyond them")
        return (f" {self.n_last_layer} of the {strongest} strongest are last-block features, which the prediction gets "
                f"right by construction (only the final norm, run live, comes after them); {beyond}.")

    def _readouts_said(self, said: Callable[[float | None], str]) -> str:
        if not self.r_readouts:
            return ""
        from interpscope.graphs.freeze import READOUT_LABELS

        parts = [f"{READOUT_LABELS.get(name, name)}: r = {said(r)}" for name, r in self.r_readouts.items()]
        return f" Diagnostic readouts, not the real model ({'; '.join(parts)})."

    def figure(self) -> go.Figure:
        from interpscope.figures.graphs import ablation_scatter

        return ablation_scatter(self)


def ablation_check(lm: LoadedModel, transcoders: Any, graph: AttributionGraph, n: int = 20, seed: int = 0,
                   groups: Sequence[Any] | None = None, prepared: GraphRun | None = None,
                   progress: Callable[[int, int], None] | None = None, readouts: Sequence[str] = ()
                   ) -> AblationCheck:
    """Ablate the n strongest feature nodes by |influence| (or, with `groups`, the n supernodes with the largest
    summed |influence|) one by one, then n random other active features of the prompt, kept by the pruned graph
    or not (the control). readouts: names of interpscope.graphs.freeze.READOUTS to measure as well (diagnostics:
    the same ablations in the real model with parts of the replacement model imposed)."""
    start = time.perf_counter()
    parts = readout_parts(readouts)
    if n < 1:
        raise InterpscopeError("The ablation check needs at least one ablation (n >= 1).")
    features = [node for node in graph.nodes if node.get("kind") == "feature"]
    ranked = [node for node in features if not node.get("sink")]
    if not ranked:
        raise InterpscopeError("The graph has no feature nodes to ablate.")
    by_id = {str(node["id"]): node for node in ranked}

    def strength(members: Sequence[dict[str, Any]]) -> float:
        return sum(abs(float(m.get("influence") or 0.0)) for m in members)

    if groups:
        sets = [([by_id[m] for m in g.members if m in by_id], g.label) for g in groups]
    else:
        sets = [([node], node_label([node])) for node in ranked]
    strongest = sorted([s for s in sets if s[0]], key=lambda s: -strength(s[0]))[:n]
    taken = {str(m["id"]) for members, _ in strongest for m in members}
    prepared = prepared or GraphRun(lm, transcoders, graph)
    control = [([node], node_label([node])) for node in prepared.random_active(n, taken, seed)]
    everything = [("strongest", s) for s in strongest] + [("random", s) for s in control]
    sets_only = [members for _, (members, _) in everything]
    predicted = prepared.predicted(sets_only, 0.0)
    linear = prepared.predicted_linear(sets_only, 0.0)
    real_linear = prepared.predicted_real_linear(sets_only, 0.0)
    from interpscope.graphs.freeze import READOUTS

    frozen_linear = prepared.predicted_real_linear(sets_only, 0.0, freeze=READOUTS["attention_norms_frozen"])
    def stage(index: int) -> Callable[[int, int], None] | None:  # one progress bar over the real and the readouts
        if progress is None:
            return None
        report = progress
        return lambda done, total: report(index * total + done, total * (1 + len(parts)))

    actual, _ = prepared.actual(sets_only, 0.0, progress=stage(0))
    diagnostic = {name: prepared.actual(sets_only, 0.0, progress=stage(index), freeze=frozen_parts)[0]
                  for index, (name, frozen_parts) in enumerate(parts.items(), start=1)}
    rows = []
    last_block = lm.adapter.n_layers - 1
    for k, (which, (members, label)) in enumerate(everything):
        ids = [str(m["id"]) for m in members]
        influence = strength(members) if all(i in by_id for i in ids) else None
        row = {"set": which, "nodes": ids, "label": label, "influence": influence, "predicted": predicted[k],
               "predicted_linear": linear[k], "predicted_pruned": prepared.pruned.predicted(ids, 0.0),
               "predicted_real_linear": real_linear[k], "predicted_frozen_linear": frozen_linear[k],
               "actual": actual[k]}
        if all(int(m["layer"]) == last_block for m in members):
            row["last_layer"] = True
        if diagnostic:
            row["readouts"] = {name: values[k] for name, values in diagnostic.items()}
        rows.append(row)

    def r_of(which: str, key: str, readout: str | None = None) -> float | None:
        chosen = [row for row in rows if row["set"] == which]
        truth = [row["readouts"][readout] if readout else row["actual"] for row in chosen]
        return pearson([row[key] for row in chosen], truth)

    def r_readouts(which: str) -> dict[str, float | None] | None:
        if not parts:
            return None
        return {name: r_of(which, "predicted_linear" if "final_norm" in frozen_parts else "predicted", name)
                for name, frozen_parts in parts.items()}
    beyond = [row for row in rows if row["set"] == "strongest" and not row.get("last_layer")]
    return AblationCheck(model=graph.model, text=graph.text, target=dict(graph.target), n=n, rows=rows,
                         r=r_of("strongest", "predicted"), r_pruned=r_of("strongest", "predicted_pruned"),
                         r_linear=r_of("strongest", "predicted_linear"),
                         r_control=r_of("random", "predicted"),
                         r_real_linear=r_of("strongest", "predicted_real_linear"),
                         r_real_linear_control=r_of("random", "predicted_real_linear"),
                         r_frozen_linear=r_of("strongest", "predicted_frozen_linear"),
                         sinks_left_out=[str(node["id"]) for node in features if node.get("sink")], seed=seed,
                         r_readouts=r_readouts("strongest"), r_readouts_control=r_readouts("random"),
                         seconds=time.perf_counter() - start,
                         n_last_layer=sum(1 for row in rows if row["set"] == "strongest" and row.get("last_layer")),
                         r_beyond_last_layer=pearson([row["predicted"] for row in beyond],
                                                     [row["actual"] for row in beyond]))


# --- which attention heads carry an edge ------------------------------------------------------------------------
def _writes(run: FrozenRun, transcoders: Any, node: dict[str, Any]) -> torch.Tensor:
    """The residual-stream vector a node adds at its position: a_f W_dec[f], an embedding row, a transcoder error."""
    kind, position = node.get("kind"), int(node["position"])
    parts = dictionary(transcoders, run.dtype)
    if kind == "feature":
        writes = parts.layers[int(node["layer"])].writes
        if len(writes) > 1:
            raise InterpscopeError(f"{node['id']} is a cross-layer transcoder feature: it writes after block "
                                   f"{writes[0][0]} and every later one, so its edges are not split by head.")
        return float(node["activation"]) * writes[0][1][int(node["feature"])]
    if kind == "embedding":
        return run.embedding_rows(position + 1)[position]
    if kind == "error":
        layer = int(node["layer"])
        with torch.no_grad():
            # the engine's error node: mlp_out - what the features write there (it holds b_dec, so the sums are
            # exact) - the skip connection's mlp_in W_skip (a linear path of the replay, not a node)
            acts = [source.encode(run.mlp_in[s][position:position + 1]) for s, source in enumerate(parts.layers)]
            rebuilt = parts.written(layer, acts, run.mlp_in[layer][position:position + 1])
        return run.mlp_out[layer][position] - rebuilt[0]
    raise InterpscopeError(f"{node['id']} writes nothing into the residual stream (a {kind} node).")


def _reads(run: FrozenRun, transcoders: Any, node: dict[str, Any], target_id: int) -> torch.Tensor:
    """The residual direction whose dot product is the node's pre-activation (the frozen norm folded in)."""
    if node.get("kind") == "feature":
        layer, position = int(node["layer"]), int(node["position"])
        column = dictionary(transcoders, run.dtype).layers[layer].W_enc[:, int(node["feature"])]
        return run.mlp_scale[layer, position] * run.gamma_mlp[layer] * column
    if node.get("kind") == "logit":
        direction = run.logit_direction(target_id)
        contrast = node.get("contrast")
        return direction if contrast is None else direction - run.logit_direction(int(contrast["id"]))
    raise InterpscopeError(f"{node['id']} reads nothing from the residual stream (a {node.get('kind')} node).")


def head_parts(run: FrozenRun, layer: int, position: int, write: torch.Tensor, query: int, read: torch.Tensor
               ) -> torch.Tensor:
    """Per head of `layer` [H]: the part of `write` (added at key `position`) that the head's OV path moves to
    `query`, read along `read`, under the frozen pattern and norm scale."""
    x = write * run.attn_scale[layer, position] * run.gamma_attn[layer]
    values = (run.W_V[layer] @ x).view(run.n_kv_heads, run.d_head)
    values = values.repeat_interleave(run.n_heads // run.n_kv_heads, dim=0)  # grouped-query: heads share values
    outputs = torch.einsum("hk,dhk->hd", values, run.W_O[layer].view(-1, run.n_heads, run.d_head))
    if run.attn_out_scale is not None and run.gamma_attn_out is not None:  # the sandwich norm at the query, frozen
        read = read * run.attn_out_scale[layer, query] * run.gamma_attn_out[layer]
    return run.patterns[layer][:, query, position] * (outputs @ read)


@dataclass
class EdgeHeads(Result):
    """One edge split by what carries it, with the attention patterns and norm scales frozen: the residual stream
    itself (source and target at one position), each attention head's OV path (exactly one hop), and the rest
    (paths through two or more heads). heads: {layer, head, part}, largest |part| first (the `top` largest)."""

    source: str
    target: str
    weight: float | None
    residual: float
    one_hop_total: float
    heads: list[dict[str, Any]]
    rest: float | None = None

    SCHEMA = "interpscope.graph.edge_heads"
    SCHEMA_VERSION = 1

    def tidy(self) -> list[dict[str, Any]]:
        return list(self.heads)

    def summary(self) -> str:
        if not self.heads:
            return f"No attention head lies between {self.source} and {self.target}: the residual stream carries it."
        top = self.heads[0]
        total = abs(self.one_hop_total) + abs(self.residual) + abs(self.rest or 0.0)
        weight = f"the edge's {self.weight:+.3g}" if self.weight is not None else "this (pruned) pair"
        rest = f"; paths through two or more heads {self.rest:+.3g}" if self.rest is not None else ""
        return (f"Head L{top['layer']}.H{top['head']} moves the most of {self.source} → {self.target}: "
                f"{top['part']:+.3g} of {weight}; all single heads together {self.one_hop_total:+.3g}, the residual "
                f"stream itself {self.residual:+.3g}{rest}"
                + (f" (the top head is {abs(top['part']) / total:.0%} of the magnitudes)." if total else "."))


def edge_heads(run: FrozenRun, transcoders: Any, graph: AttributionGraph, source: str, target: str,
               top: int = 10) -> EdgeHeads:
    """Split source -> target by attention head (one hop) from the graph prompt's frozen run (replay.record)."""
    nodes = {str(n["id"]): n for n in graph.nodes}
    if source not in nodes or target not in nodes:
        raise InterpscopeError(f"{source} → {target} is not a pair of nodes of this graph.")
    src, dst = nodes[source], nodes[target]
    write = _writes(run, transcoders, src)
    read = _reads(run, transcoders, dst, int(graph.target["id"]))
    ps = int(src["position"])
    pt = run.n_tokens - 1 if dst.get("kind") == "logit" else int(dst["position"])
    if pt < ps:
        raise InterpscopeError(f"{source} is at position {ps}, after {target} at {pt}: no path runs backwards.")
    first = max(int(src["layer"]) + 1, 0)  # an embedding (layer -1) is read by every attention layer
    last = run.n_layers - 1 if dst.get("kind") == "logit" else int(dst["layer"])  # a feature reads after attention
    heads = []
    for layer in range(first, last + 1):
        parts = head_parts(run, layer, ps, write, pt, read)
        heads += [{"layer": layer, "head": h, "part": float(v)} for h, v in enumerate(parts.tolist())]
    heads.sort(key=lambda h: -abs(h["part"]))
    residual = float(write @ read) if ps == pt else 0.0
    weights = [float(e["weight"]) for e in graph.edges if str(e["source"]) == source and str(e["target"]) == target]
    weight = weights[0] if weights else None
    one_hop = float(sum(h["part"] for h in heads))
    return EdgeHeads(source=source, target=target, weight=weight, residual=residual, one_hop_total=one_hop,
                     heads=heads[:top], rest=None if weight is None else weight - residual - one_hop)
