"""How the SAE feature views' results read as one document: the JSON that `interpscope sae prompt|steer|feature
--json`, the pages' JSON export and the Python API's `to_dict()` all give, their tidy tables and their figures.

Each class here is the `Result` side of one result dataclass (PromptFeatures, SteeringResult, FeatureCard), which
inherits it: the data stays where it is computed, the document shape is said once, here. Figures come from the
builders in interpscope.figures, imported only when a figure is asked for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from interpscope.results import Result, to_plain


class PromptFeaturesDocument(Result):
    """Features on a text (the SAE page's prompt view, `interpscope sae prompt`, `interpscope.sae.features`).

    Document: model, hook, tokens and their ids, the positions left out of the ranking (and why, when measured), the
    top features with their peak activation over the ranked positions, their activations on every token
    (`top_activations` [T, n_top]: the heatmap), and per token its active features, largest first (at most
    `per_token_limit`). The full [T, d_sae] activation matrix stays out (it is on the object)."""

    SCHEMA = "interpscope.sae.features"
    SCHEMA_VERSION = 1

    # the fields this document reads; PromptFeatures (a dataclass) defines them
    tokens: list[str]
    token_ids: list[int]
    top_features: list[int]
    top_values: np.ndarray
    sink_positions: list[int]
    model: str | None
    hook: str | None
    per_token_limit: int

    @property
    def excluded_positions(self) -> list[int]:
        """Positions never ranked (PromptFeatures: the measured sinks and a prepended BOS)."""
        raise NotImplementedError

    def active_at(self, position: int, limit: int = 50) -> list[dict]:
        """Features active at one token, largest first (PromptFeatures)."""
        raise NotImplementedError

    def _peaks(self) -> list[float]:
        excluded = set(self.excluded_positions)
        ranked = [p for p in range(len(self.tokens)) if p not in excluded]
        if not ranked or not self.top_values.size:
            return [0.0] * len(self.top_features)
        return [float(v) for v in self.top_values[ranked].max(axis=0)]

    def payload(self) -> dict[str, Any]:
        excluded = self.excluded_positions
        reasons = self.reasons() if hasattr(self, "reasons") else {}
        limit = self.per_token_limit
        return to_plain({
            "model": self.model, "hook": self.hook, "tokens": self.tokens, "token_ids": self.token_ids,
            "bos_prepended": getattr(self, "bos_prepended", None), "excluded_positions": excluded,
            "sink_positions": self.sink_positions, "sinks": getattr(self, "sinks", None) or None,
            "top_features": [{"feature": f, "max_activation": v}
                             for f, v in zip(self.top_features, self._peaks(), strict=True)],
            "top_activations": self.top_values,
            "per_token_limit": limit,
            "per_token": [{"position": p, "token": t, "excluded": p in excluded, "excluded_reason": reasons.get(p),
                           "features": self.active_at(p, limit) if limit else []}
                          for p, t in enumerate(self.tokens)]})

    def tidy(self) -> list[dict]:
        """One row per (token, top feature): the heatmap as a long table."""
        excluded = set(self.excluded_positions)
        return [{"position": p, "token": t, "excluded": p in excluded, "feature": f,
                 "activation": float(self.top_values[p, j])}
                for p, t in enumerate(self.tokens) for j, f in enumerate(self.top_features)]

    def figure(self):
        from interpscope.figures.sae import prompt_heatmap_figure

        reasons = self.reasons() if hasattr(self, "reasons") else None
        title = f"Top {len(self.top_features)} features on the prompt" + (f" ({self.hook})" if self.hook else "")
        return prompt_heatmap_figure(self.tokens, self.top_features, self.top_values, title,
                                     self.excluded_positions, **({"reasons": reasons} if reasons else {}))


class SteeringDocument(Result):
    """Clean vs edited run of one prompt (the Steering view, `interpscope sae steer`, `interpscope.sae.steer`).
    `strength` is absent in ablate mode (it does not apply there)."""

    SCHEMA = "interpscope.sae.steering"
    SCHEMA_VERSION = 1

    # the fields this document reads; SteeringResult (a dataclass) defines them
    feature: int
    mode: str
    strength: float | None
    tokens: list[str]
    clean_top: list[dict]
    edited_top: list[dict]
    logprob_change: np.ndarray
    feature_on_prompt: np.ndarray

    def _verb(self) -> str:
        return f"+ {self.strength:.3g} × direction" if self.mode == "add" else "removed"

    def tidy(self) -> list[dict]:
        """One row per predicted token: Δ log p(actual next token) and the feature's activation on the prompt."""
        return [{"position": p, "token": self.tokens[p], "feature_activation": float(self.feature_on_prompt[p]),
                 "logprob_change": float(self.logprob_change[p - 1]) if p >= 1 else None}
                for p in range(len(self.tokens))]

    def figure(self):
        from interpscope.figures.sae import steering_figure

        return steering_figure(self.clean_top, self.edited_top,
                               f"Next token: clean vs feature {self.feature} {self._verb()}")


class FeatureCardDocument(Result):
    """One feature's card from a feature store (the feature page, `interpscope sae feature`,
    `interpscope.sae.feature`): top contexts, activation and logit histograms, logit effects, neighbours."""

    SCHEMA = "interpscope.sae.feature"
    SCHEMA_VERSION = 1

    # the fields this document reads; FeatureCard (a dataclass) defines them
    id: int
    fire_count: int
    # Contexts and Histograms (not imported: interpscope.sae.store.store imports this module)
    top_contexts: list[Any]
    histogram: Any
    logit_histogram: Any

    def tidy(self) -> list[dict]:
        """One row per top context: its activation, the firing token, where it is in the corpus."""
        return [{"feature": self.id, "rank": rank, "max_activation": ctx.max, "token": ctx.tokens[ctx.centre],
                 "context": "".join(ctx.tokens), "sequence": ctx.sequence, "position": ctx.position}
                for rank, ctx in enumerate(self.top_contexts)]

    def figure(self):
        """The activation histogram (the logit histogram for a feature that never fired), as the page shows."""
        from interpscope.figures.sae import histogram_figure

        if self.fire_count:
            return histogram_figure(self.histogram.edges, self.histogram.counts,
                                    f"Feature {self.id}: activations when > 0", "activation")
        return histogram_figure(self.logit_histogram.edges, self.logit_histogram.counts,
                                f"Feature {self.id}: logit weights over the vocabulary", "logit weight", y_log=True,
                                color="rgb(100,100,100)")


@dataclass
class FeatureSearch(Result):
    """Features found by id, top-logit token or a word in their top contexts (`interpscope sae search`, the feature
    browser's search export): each with its label and strongest context; `total` counts every match, `results`
    holds the first ones asked for; `reason` says why nothing matched (absent when something did)."""

    store: str
    query: str
    kind: str
    results: list[dict]
    total: int
    reason: str | None = None

    SCHEMA = "interpscope.sae.search"
    SCHEMA_VERSION = 1

    def tidy(self) -> list[dict]:
        return [dict(row) for row in self.results]


@dataclass
class ExplanationRun(Result):
    """What `interpscope sae explain` wrote: how many features got an explanation, by which writer, and their mean
    detection score by the named scorer (absent when none was scored)."""

    store: str
    explained: int
    scorer: str
    writer: str
    mean_score: float | None = None

    SCHEMA = "interpscope.sae.explanations"
    SCHEMA_VERSION = 1
