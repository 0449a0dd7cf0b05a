"""Information flow to one prediction (transformers): the logit lens layer by layer, each layer's attention and MLP
contribution to the explained value, and a token -> component -> prediction graph from AttnLRP's latent relevance.

- Logit lens: the residual stream after the embeddings and after every block, put through the final norm (its own
  scale at that layer) and the unembedding; the target token's probability and rank at each step. After the last
  block it is exactly the model's own prediction.
- Contributions (direct logit attribution): the final norm's scale frozen at its value on the last residual, the
  explained value is a sum over what was written into the residual stream: the embeddings (and positions), each
  layer's attention output and MLP output (as they join the residual: after Gemma's output norms), plus constants
  (the final norm's bias and the unembedding bias). The parts add up to the value exactly.
- Graph: AttnLRP relevance of every head's output and every MLP, summed over positions; components whose |relevance|
  is at least `threshold` x |value| are kept. Edges: token s -> head (l, h) carries the relevance reaching position
  s's values through that head (for grouped-query attention, a key/value head's relevance is split among its query
  heads in proportion to their output relevance); token t -> MLP l the relevance of that MLP's neurons at position t;
  component -> prediction its total relevance; token -> prediction each token's input relevance.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import capture, model_lock
from interpscope.config import InterpscopeError
from interpscope.flow.compare import LensComparison, compare_lenses
from interpscope.graph import GraphEdge, GraphNode
from interpscope.relevance.api import make_target
from interpscope.relevance.engine import LatentRelevance, attribute
from interpscope.relevance.methods import get_method
from interpscope.relevance.targets import Target
from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

DEFAULT_THRESHOLD = 0.05


@dataclass
class InformationFlow(Result):
    """Everything the information-flow view shows for one prompt and target (schema interpscope.flow).

    The document (`interpscope flow --json`, the flow page's exports, `to_dict()`): model, method, tokens, target,
    value, one row per lens step (`steps`: probability, rank and value of the target after the embeddings and each
    block, with that block's attention and MLP contributions), the embedding and constant contributions, the
    input tokens' relevance, the graph (`nodes`, `edges`) at `threshold`, the top neurons and excluded positions.
    `at(threshold)` is the same flow with the graph cut at another threshold."""

    SCHEMA = "interpscope.flow"
    SCHEMA_VERSION = 1

    model: str
    method: str
    tokens: list[str]
    target: Target
    value: float
    lens_layers: list[str]
    lens_probability: np.ndarray
    lens_rank: np.ndarray
    lens_value: np.ndarray
    embed_contribution: float
    attn_contribution: np.ndarray
    mlp_contribution: np.ndarray
    constant_contribution: float
    input_relevance: np.ndarray
    latent: LatentRelevance = field(repr=False)
    top_neurons: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    sinks: list[dict] = field(default_factory=list)  # excluded positions and why (interpscope.sinks.SinkReport.rows)
    bos_prepended: bool = False
    threshold: float = DEFAULT_THRESHOLD  # where the document's and figure()'s graph is cut
    tuned_lens: LensComparison | None = None  # the tuned lens beside the logit lens (asked for with lens="tuned")

    def at(self, threshold: float) -> InformationFlow:
        """This flow with its graph cut at `threshold` (a fraction of |value|, 0..1)."""
        if not 0 <= threshold <= 1:
            raise InterpscopeError(f"The threshold is a fraction of the explained value, 0..1 (got {threshold}).")
        return replace(self, threshold=float(threshold))

    def payload(self) -> dict[str, Any]:
        nodes, edges = self.graph(self.threshold)
        return to_plain({
            "model": self.model, "method": self.method, "tokens": self.tokens, "target": self.target,
            "value": self.value, "bos_prepended": self.bos_prepended, "sinks": self.sinks,
            "steps": [{k: v for k, v in row.items() if k not in ("target", "model")} for row in self.tidy()],
            "embed_contribution": self.embed_contribution, "constant_contribution": self.constant_contribution,
            "input_relevance": self.input_relevance, "threshold": self.threshold, "nodes": nodes, "edges": edges,
            "top_neurons": self.top_neurons, "seconds": self.seconds,
            "tuned_lens": self.tuned_lens.payload() if self.tuned_lens is not None else None})

    def figure(self):
        """The flow page's graph: tokens -> heads and MLPs above the threshold -> prediction."""
        from interpscope.figures.flow import graph_figure

        nodes, edges = self.graph(self.threshold)
        n_components = sum(n.kind in ("head", "mlp") for n in nodes)
        return graph_figure(nodes, edges, len(self.lens_layers) - 1,
                            f"{n_components} heads and MLPs above {self.threshold:.0%} of the value ({self.method})")

    def lens_figure(self):
        """The flow page's logit lens: the target's probability and rank after the embeddings and each block."""
        from interpscope.figures.flow import lens_figure

        return lens_figure(self.lens_layers, self.lens_probability, self.lens_rank, self.target.label)

    def contributions_figure(self):
        """The flow page's per-layer attention and MLP contributions to the explained value."""
        from interpscope.figures.flow import contributions_figure

        return contributions_figure(self.attn_contribution, self.mlp_contribution, self.embed_contribution,
                                    self.target.value_label)

    def graph(self, threshold: float = DEFAULT_THRESHOLD) -> tuple[list[GraphNode], list[GraphEdge]]:
        """The token -> component -> prediction graph with components above threshold x |value|; excluded tokens
        (measured sinks, a prepended BOS) are named in their labels."""
        named = {row["position"]: "BOS" if row["prepended"] else "sink" for row in self.sinks}
        return flow_graph(self.latent, self.input_relevance, self.tokens, self.value, threshold, named)

    def tidy(self) -> list[dict]:
        """One row per lens step (embeddings, then each block), with that block's contributions."""
        rows = []
        for i, name in enumerate(self.lens_layers):
            layer = i - 1
            rows.append({"step": name, "probability": float(self.lens_probability[i]),
                         "rank": int(self.lens_rank[i]), "lens_value": float(self.lens_value[i]),
                         "attention_contribution": float(self.attn_contribution[layer]) if layer >= 0 else None,
                         "mlp_contribution": float(self.mlp_contribution[layer]) if layer >= 0 else None,
                         "embedding_contribution": self.embed_contribution if layer < 0 else None,
                         "target": self.target.label, "model": self.model})
        return rows


def _residuals(adapter, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    n = adapter.n_layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(n)),
             *(f"blocks.{layer}.hook_attn_out" for layer in range(n)),
             *(f"blocks.{layer}.hook_mlp_out" for layer in range(n))]
    return capture(adapter, ids, names).activations


def _direction(adapter, target: Target) -> torch.Tensor:
    """The explained value as a linear function of the normalised residual: W_U' columns (gamma folded in)."""
    W_U = adapter.folded_unembedding(torch.float64).cpu()
    column = W_U[:, target.token_id].clone()
    if target.contrast_id is not None:
        column -= W_U[:, target.contrast_id]
    elif target.vs_rest:
        column -= (W_U.sum(1) - W_U[:, target.token_id]) / (W_U.shape[1] - 1)
    return column


def _constant(adapter, target: Target) -> float:
    """What the explained value gets whatever the residual: the final norm's bias and the unembedding bias."""
    norm = adapter.folded_norm()
    W_U = adapter.W_U().detach().double().cpu()
    logits = torch.zeros(W_U.shape[1], dtype=torch.float64)
    if norm.beta is not None:
        logits += norm.beta.double().cpu() @ W_U
    if adapter.b_U() is not None:
        logits += adapter.b_U().detach().double().cpu()
    return float(target.value(logits))


def logit_lens(adapter, acts: dict[str, torch.Tensor], target: Target) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probability, rank, explained value) of the target after the embeddings and after each block."""
    norm = adapter.folded_norm()
    W_U = adapter.W_U().detach().double().cpu()
    b_U = adapter.b_U()
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(adapter.n_layers))]
    probability, rank, value = [], [], []
    for name in names:
        residual = acts[name][target.position].double().cpu()
        normed = norm.gamma.double().cpu() * norm.centre(residual) / torch.sqrt(
            norm.centre(residual).pow(2).mean() + norm.eps)
        logits = (normed + (norm.beta.double().cpu() if norm.beta is not None else 0)) @ W_U
        if b_U is not None:
            logits = logits + b_U.detach().double().cpu()
        probs = torch.softmax(logits, -1)
        probability.append(float(probs[target.token_id]))
        rank.append(int((logits > logits[target.token_id]).sum()) + 1)
        value.append(float(target.value(logits.double())))
    return np.array(probability), np.array(rank), np.array(value)


def contributions(adapter, acts: dict[str, torch.Tensor], target: Target
                  ) -> tuple[float, np.ndarray, np.ndarray, float]:
    """(embeddings, attention per layer, MLP per layer, constants): direct contributions to the explained value with
    the final norm's scale frozen at the last residual; they add up to the value."""
    norm = adapter.folded_norm()
    final = acts[f"blocks.{adapter.n_layers - 1}.hook_resid_post"][target.position].double()
    scale = float(torch.sqrt(norm.centre(final).pow(2).mean() + norm.eps))
    direction = _direction(adapter, target)

    def part(name: str) -> float:
        vector = norm.centre(acts[name][target.position].double().cpu())
        return float(vector @ direction) / scale

    n = adapter.n_layers
    attn = np.array([part(f"blocks.{layer}.hook_attn_out") for layer in range(n)])
    mlp = np.array([part(f"blocks.{layer}.hook_mlp_out") for layer in range(n)])
    return part("blocks.0.hook_resid_pre"), attn, mlp, _constant(adapter, target)


def flow_graph(latent: LatentRelevance, input_relevance: np.ndarray, tokens: list[str], value: float,
               threshold: float, named: dict[int, str] | None = None) -> tuple[list[GraphNode], list[GraphEdge]]:
    """Nodes and edges of the token -> component -> prediction graph (components above threshold x |value|)."""
    if not 0 <= threshold <= 1:
        raise InterpscopeError(f"The threshold is a fraction of the explained value, 0..1 (got {threshold}).")
    floor = threshold * abs(value)
    named = named or {}
    nodes = [GraphNode(f"t{i}", "token", f"{i}: {tok!r}" + (f" ({named[i]})" if i in named else ""), float(r),
                       position=i)
             for i, (tok, r) in enumerate(zip(tokens, input_relevance, strict=True))]
    nodes.append(GraphNode("out", "prediction", "prediction", value))
    edges = [GraphEdge(f"t{i}", "out", float(r)) for i, r in enumerate(input_relevance) if abs(r) >= floor]
    if latent.heads is not None:
        n_heads = latent.heads.shape[1]
        for layer in range(latent.heads.shape[0]):
            by_kv = latent.values_by_position[layer] if latent.values_by_position is not None else None
            group = n_heads // by_kv.shape[1] if by_kv is not None and by_kv.shape[1] else 1
            for head in range(n_heads):
                total = float(latent.heads[layer, head])
                if abs(total) < floor:
                    continue
                nodes.append(GraphNode(f"h{layer}.{head}", "head", f"L{layer}.H{head}", total, layer, head))
                edges.append(GraphEdge(f"h{layer}.{head}", "out", total))
                if by_kv is None:
                    continue
                kv = head // group
                siblings = latent.heads[layer, kv * group:(kv + 1) * group]
                share = total / float(siblings.sum()) if abs(float(siblings.sum())) > 1e-12 else 1.0 / group
                for pos in range(by_kv.shape[0]):
                    weight = float(by_kv[pos, kv]) * share
                    if abs(weight) >= floor:
                        edges.append(GraphEdge(f"t{pos}", f"h{layer}.{head}", weight))
    if latent.mlp_by_position is not None:
        for layer in range(latent.mlp_by_position.shape[0]):
            total = float(latent.mlp_by_position[layer].sum())
            if abs(total) < floor:
                continue
            nodes.append(GraphNode(f"m{layer}", "mlp", f"MLP {layer}", total, layer))
            edges.append(GraphEdge(f"m{layer}", "out", total))
            for pos, weight in enumerate(latent.mlp_by_position[layer]):
                if abs(weight) >= floor:
                    edges.append(GraphEdge(f"t{pos}", f"m{layer}", float(weight)))
    return nodes, edges


def information_flow(lm: LoadedModel, text: str, *, token: str | int | None = None, contrast: tuple | None = None,
                     method: str = "attnlrp", prepend_bos: bool | None = None, lens: str = "logit",
                     progress: Callable[[float, str], None] | None = None) -> InformationFlow:
    """The logit lens, per-layer contributions and AttnLRP latent relevance for the next-token target after `text`
    (the graph at any threshold comes from InformationFlow.graph). prepend_bos: put the model's BOS first (None:
    where the tokenizer adds none), so the first word is explained like any other; sinks are measured. lens
    "tuned": also the shipped tuned lens beside the logit lens (interpscope.flow.compare), per-layer KL to the final
    distribution. progress(fraction, stage) before each pass (a page's bar and Stop)."""
    from interpscope.relevance.api import input_ids_for, model_kind
    from interpscope.relevance.sinks import sink_report
    from interpscope.sinks import words

    spec = get_method(method, lm.adapter)
    if not spec.rules or "attention" not in lm.adapter.capabilities():
        raise InterpscopeError(f"Information flow needs an LRP method on a transformer; {spec.label} on "
                               f"{lm.family} models does not give relevance inside attention.")
    if lens not in ("logit", "tuned"):
        raise InterpscopeError(f"The lens is 'logit' or 'tuned' (got {lens!r}).")
    start = time.perf_counter()
    ids, prepended = input_ids_for(lm, text, prepend_bos)
    target = make_target(lm, ids, token=token, contrast=contrast)
    say = progress or (lambda fraction, stage: None)
    with model_lock(lm):
        say(0.0, "measuring sinks")
        report = sink_report(lm.adapter, ids, 0 if prepended else None)
        say(0.2, "the residual stream (logit lens)")  # fractions: the stages' shares of the time, measured
        acts = _residuals(lm.adapter, ids)
        say(0.5, f"{spec.label} relevance (a forward and a backward pass)")
        attribution = attribute(lm.adapter, ids, target, spec.rules(lm.adapter), latent=True, conservation=False)
        if lens == "tuned":
            say(0.85, "the tuned lens")
        tuned = compare_lenses(lm, ids, report.positions) if lens == "tuned" else None
    say(1.0, "done")
    acts = {name: tensor[0] if tensor.dim() == 3 else tensor for name, tensor in acts.items()}
    probability, rank, lens_value = logit_lens(lm.adapter, acts, target)
    embed, attn, mlp, constant = contributions(lm.adapter, acts, target)
    from interpscope.relevance.api import top_neurons

    latent = attribution.latent
    if latent is None:  # asked for (latent=True) above
        raise RuntimeError("the attribution kept no latent relevance")
    return InformationFlow(
        model=lm.name, method=spec.label, tokens=(tokens := lm.token_strings(ids[0])), target=target,
        value=attribution.logit, sinks=report.rows(tokens, words(model_kind(lm.adapter))["sink"]),
        bos_prepended=prepended,
        lens_layers=["embeddings", *(f"block {layer}" for layer in range(lm.adapter.n_layers))],
        lens_probability=probability, lens_rank=rank, lens_value=lens_value, embed_contribution=embed,
        attn_contribution=attn, mlp_contribution=mlp, constant_contribution=constant,
        input_relevance=attribution.relevance, latent=latent,
        top_neurons=top_neurons(latent, 20), seconds=time.perf_counter() - start, tuned_lens=tuned)


def attention_pattern(lm: LoadedModel, text: str, layer: int, head: int,
                      prepend_bos: bool | None = None) -> tuple[list[str], np.ndarray]:
    """One head's attention probabilities [T_query, T_key] on `text` (for the graph's click-through), on the same
    tokens the flow ran on: `prepend_bos` as the flow's (InformationFlow.bos_prepended)."""
    adapter = lm.adapter
    if not 0 <= layer < adapter.n_layers or not 0 <= head < adapter.n_heads:
        raise InterpscopeError(f"No head L{layer}.H{head}: this model has {adapter.n_layers} layers of "
                               f"{adapter.n_heads} heads.")
    from interpscope.relevance.api import input_ids_for

    ids, _ = input_ids_for(lm, text, prepend_bos)
    with torch.no_grad():
        out = lm.model(input_ids=ids, output_attentions=True, use_cache=False)
    if not out.attentions or out.attentions[layer] is None:
        raise InterpscopeError("This model does not return attention probabilities.")
    return lm.token_strings(ids[0]), out.attentions[layer][0, head].float().cpu().numpy()
