"""The attribution graph of one prompt as a result (schema interpscope.graph), and its Neuronpedia export."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interpscope.results import Result

NODE_KINDS = ("embedding", "feature", "error", "logit")


def node_id(kind: str, layer: int | None, position: int, feature: int | None = None) -> str:
    """Stable node ids: `E_<pos>` (embedding), `F<layer>_<feature>_<pos>`, `R<layer>_<pos>` (error, the
    transcoder's residual), `L_<token id>` (logit; position is the predicted position)."""
    if kind == "embedding":
        return f"E_{position}"
    if kind == "feature":
        return f"F{layer}_{feature}_{position}"
    if kind == "error":
        return f"R{layer}_{position}"
    if kind == "logit":
        return f"L_{feature}"
    raise ValueError(f"unknown node kind {kind!r}")


@dataclass
class AttributionGraph(Result):
    """A pruned attribution graph over a transcoder replacement model.

    nodes: dicts {id, kind (embedding|feature|error|logit), layer, position, token, feature (features; the token
    id for a logit), activation (a feature's activation; the logit's value), influence (on the target logit through
    the normalised adjacency, see interpscope.graphs.prune), sink (only when true)}; embeddings have layer -1 and
    the logit layer n_layers; logit_effect: the node's direct effect on the target logit (its entry in the logit's
    row, before pruning). edges: {source, target, weight}: the source's direct (linear) effect on the target's
    pre-activation. lrp_edges: the same nodes' edges into the logit with LRP relevance as weights (method named in
    `lrp_method`); agreement: {spearman, moved} between direct-effect and LRP node influences.
    logit: the target's logit from the real forward pass; logit_inputs_sum: the sum of ALL direct contributions
    into the logit node before pruning (embeddings, every active feature, every error node); bias_sum the model's
    biases on that path (absent for Llama, which has none): logit = logit_inputs_sum + bias_sum.
    logits: only when the graph has more than one logit node (build_graph's max_logits): one entry per logit node,
    the target first, {token, id, probability, weight (its share of the influence seed), logit, logit_inputs_sum,
    bias_sum (only where the model has biases), node (its node id)}; those logit nodes carry `probability` and
    `target` (true for the target's) too, and influence is on their weighted sum.
    convention: "interpscope" (above) or "circuit-tracer" (interpscope.graphs.convention; schema version 2): then
    `logit` and the logit nodes' activations are the demeaned logit (logit - mean logit; with a contrast, the
    difference), the logit nodes are weighted by their raw probabilities, only expanded features are nodes, pruning
    is by `thresholds` {node, edge} (node_budget and edge_budget are 0), and `left_out` {b_dec, bos, total} gives the
    direct effects on the target of what is in no node (the decoder biases, the first position's MLP outputs), so
    logit = logit_inputs_sum + left_out.total (+ bias_sum); each `logits` entry has its own left_out."""

    model: str
    transcoders: str
    text: str
    tokens: list[str]
    target: dict[str, Any]
    logit: float
    logit_inputs_sum: float
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    lrp_method: str | None = None
    lrp_edges: list[dict[str, Any]] | None = None
    agreement: dict[str, Any] | None = None
    replacement_score: float | None = None
    completeness_score: float | None = None
    node_budget: int = 0
    edge_budget: int = 0
    max_feature_nodes: int = 0
    n_active_features: int = 0
    n_expanded_features: int = 0
    sinks: list[dict[str, Any]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    bias_sum: float | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    logits: list[dict[str, Any]] | None = None
    convention: str = "interpscope"
    left_out: dict[str, float] | None = None
    thresholds: dict[str, float] | None = None

    SCHEMA = "interpscope.graph"
    SCHEMA_VERSION = 2

    # --- views -------------------------------------------------------------------------------------------
    def figure(self):
        """The graph as the page draws it (tokens across, layers up, the logit on top; interpscope.figures.graphs),
        without a selection."""
        from interpscope.figures.graphs import graph_figure

        logit_layers = [int(n["layer"]) for n in self.nodes if n.get("kind") == "logit" and n.get("layer") is not None]
        n_layers = (logit_layers[0] if logit_layers else
                    1 + max((int(n["layer"]) for n in self.nodes if n.get("layer") is not None), default=0))
        return graph_figure(self.nodes, self.edges, self.tokens, n_layers,
                            f"Attribution graph of {self.target.get('token', '')!r}")

    def node(self, node_id: str) -> dict[str, Any]:
        for node in self.nodes:
            if node["id"] == node_id:
                return node
        raise KeyError(node_id)

    def tidy(self) -> list[dict[str, Any]]:
        """The node table: one row per node, its fields as columns."""
        columns = ("id", "kind", "layer", "position", "token", "feature", "activation", "influence", "logit_effect",
                   "sink")
        return [{c: node.get(c) for c in columns} for node in self.nodes]

    def agreement_sentence(self, n_into: int) -> str | None:
        """The page's reading of direct effects beside LRP: the Spearman rho and the verdict it meets ('mostly agree'
        from 0.7, 'partly' from 0.3), compared unrounded and printed so the comparison shows (0.6996 is not 0.70)."""
        agreement = self.agreement or {}
        rho, moved = agreement.get("spearman"), agreement.get("moved") or []
        if rho is None:
            return None
        cuts = ((0.7, "mostly agree"), (0.3, "partly agree"))
        verdict = next((words for cut, words in cuts if rho >= cut), "disagree")
        shown = f"{rho:.2f}"
        near = next((cut for cut, _ in cuts if f"{cut:.2f}" == shown and rho != cut), None)
        if near is not None:  # rounding would hide which side of the cut it fell on
            shown = f"{rho:.4f} ({'below' if rho < near else 'above'} {near:g})"
        sentence = (f"Over {agreement.get('n_nodes', n_into)} nodes the two rank contributions to the logit with "
                    f"Spearman ρ = {shown}: they {verdict}.")
        if moved:
            top = moved[0]
            sentence += (f" {top['node']} moves most: rank {top['direct_rank']} by direct effect "
                         f"({top['direct']:+.3g}), rank {top['lrp_rank']} by LRP ({top['lrp']:+.3g}).")
        return sentence

    def to_neuronpedia(self, slug: str | None = None) -> dict[str, Any]:
        from interpscope.graphs.neuronpedia import to_neuronpedia

        return to_neuronpedia(self, slug)
