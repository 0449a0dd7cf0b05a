"""Every attention head's pattern on one text, with the positions no colour scale may use named.

The probabilities come from the model's own eager attention (interpscope.models.loading sets the eager
implementation), read off one plain forward pass by scoped read hooks (interpscope.capture). Sinks are measured on
the middle residual of the same text (interpscope.relevance.sinks): a key column that is a measured attention sink
(or a BOS the caller prepended) is drawn with its true values but never sets the colour scale, and it is named
beside the figure.

Per head, the document gives what the grid shows: the mean attention on the previous token, on the query itself,
on the excluded positions, and the mean entropy of the rows, with the score a uniform causal pattern gets beside
each (the chance level). The full [T, T] pattern is in the document only for the heads asked for (`heads`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.config import InterpscopeError
from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

SUMMARIES = ("previous_token", "self", "sinks", "entropy")


def parse_head(text: str, n_layers: int, n_heads: int) -> tuple[int, int]:
    """'L.H' (or 'L,H' / 'LxH') -> (layer, head), checked against the model's sizes."""
    cleaned = str(text).strip().upper().lstrip("L").replace("H", "").replace(",", ".").replace("X", ".")
    parts = cleaned.split(".")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InterpscopeError(f"A head is written LAYER.HEAD, e.g. 3.1 (got {text!r}).")
    layer, head = int(parts[0]), int(parts[1])
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise InterpscopeError(f"No head {layer}.{head}: this model has {n_layers} layers of {n_heads} heads "
                               f"(0.0 .. {n_layers - 1}.{n_heads - 1}).")
    return layer, head


def attention_probabilities(lm: LoadedModel, input_ids: torch.Tensor, stop: bool = True) -> torch.Tensor:
    """Attention probabilities [L, B, H, T, T] (float32, CPU) of one forward pass on input_ids [B, T], read off each
    attention module's output by a scoped read hook (interpscope.capture: nothing is changed, and no hook outlives
    the pass). The eager attention implementation returns its probabilities there. With `stop`, the pass ends once the
    last layer's attention has run: the last MLP, the final norm and the unembedding are not computed."""
    from interpscope.capture import StopForward, scoped

    adapter = lm.adapter
    if "attention" not in adapter.capabilities():
        raise InterpscopeError(f"{lm.name} ({lm.family}) has no attention heads.")
    found: dict[int, torch.Tensor] = {}
    modules = [(layer, adapter.attention(layer)) for layer in range(adapter.n_layers)]
    last = max((layer for layer, module in modules if module is not None), default=-1)

    def keeper(layer: int):
        def keep(module, args, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if isinstance(weights, torch.Tensor) and weights.dim() == 4:
                found[layer] = weights.detach().float().cpu()
            if stop and layer == last:
                raise StopForward
        return keep

    with torch.no_grad(), scoped([(m, keeper(layer)) for layer, m in modules if m is not None], role="read"):
        try:
            lm.model(input_ids=input_ids.to(lm.device), use_cache=False)
        except StopForward:
            pass
    if len(found) != adapter.n_layers:
        raise InterpscopeError("This model does not return attention probabilities (it needs the eager attention "
                               "implementation).")
    return torch.stack([found[layer] for layer in range(adapter.n_layers)])


def causal_chance(n_tokens: int) -> dict[str, float]:
    """What a uniform causal pattern (query i spreads 1/(i+1) over keys 0..i) scores on each summary."""
    i = np.arange(n_tokens, dtype=np.float64)
    prev = float(np.mean(1.0 / (i[1:] + 1))) if n_tokens > 1 else float("nan")
    return {"previous_token": prev, "self": float(np.mean(1.0 / (i + 1))),
            "entropy": float(np.mean(np.log(i + 1)))}


def summaries(pattern: np.ndarray, excluded: list[int]) -> dict[str, np.ndarray]:
    """Per-head summaries [L, H] of patterns [L, H, T, T]: mean previous-token, self and excluded-key attention,
    mean row entropy (nats; -p log p, 0 where p = 0). In float64, one layer at a time (no full float64 copy of a long
    text's patterns)."""
    source = torch.as_tensor(pattern)
    T = source.shape[-1]
    prev, self_, sinks, entropy = [], [], [], []
    queries, keys = torch.arange(1, T), torch.arange(T - 1)
    for layer in source:
        p = layer.double()  # [H, T, T]
        prev.append(p[:, queries, keys].mean(-1) if T > 1 else torch.full(p.shape[:1], float("nan")))
        self_.append(p.diagonal(dim1=-2, dim2=-1).mean(-1))
        sinks.append(p[..., excluded].sum(-1).mean(-1) if excluded else torch.zeros(p.shape[:1], dtype=p.dtype))
        entropy.append(torch.special.entr(p).sum(-1).mean(-1))
    return {name: torch.stack(values).numpy() for name, values in
            (("previous_token", prev), ("self", self_), ("sinks", sinks), ("entropy", entropy))}


@dataclass
class HeadPatterns(Result):
    """Every head's attention pattern on one text (schema interpscope.heads).

    patterns [L, H, T_query, T_key] (float16 in memory); `heads` are the "L.H" names whose full pattern the document
    carries (`with_heads`); summaries [L, H] per SUMMARIES with their chance levels; sinks: excluded positions and
    why (interpscope.sinks.SinkReport.rows)."""

    SCHEMA = "interpscope.heads"
    SCHEMA_VERSION = 1

    model: str
    tokens: list[str]
    patterns: np.ndarray = field(repr=False)
    stats: dict[str, np.ndarray]
    chance: dict[str, float]
    sinks: list[dict] = field(default_factory=list)
    bos_prepended: bool = False
    heads: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def n_layers(self) -> int:
        return int(self.patterns.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.patterns.shape[1])

    @property
    def excluded(self) -> list[int]:
        """Key positions that never set a colour scale (measured sinks, a prepended BOS)."""
        return [int(row["position"]) for row in self.sinks]

    def pattern(self, layer: int, head: int) -> np.ndarray:
        """One head's probabilities [T_query, T_key] (float32)."""
        return self.patterns[layer, head].astype(np.float32)

    def with_heads(self, heads: list[str] | list[tuple[int, int]]) -> HeadPatterns:
        """The same patterns whose document carries these heads' full patterns ("L.H" or (layer, head))."""
        names = []
        for item in heads:
            layer, head = item if isinstance(item, tuple) else parse_head(item, self.n_layers, self.n_heads)
            names.append(f"{layer}.{head}")
        return replace(self, heads=list(dict.fromkeys(names)))

    def tidy(self) -> list[dict]:
        """One row per head with its summaries."""
        return [{"layer": layer, "head": head, **{k: float(self.stats[k][layer, head]) for k in SUMMARIES}}
                for layer in range(self.n_layers) for head in range(self.n_heads)]

    def payload(self) -> dict[str, Any]:
        chosen = {}
        for name in self.heads:
            layer, head = (int(x) for x in name.split("."))
            chosen[name] = np.round(self.pattern(layer, head), 5)
        return to_plain({"model": self.model, "tokens": self.tokens, "n_layers": self.n_layers,
                         "n_heads": self.n_heads, "bos_prepended": self.bos_prepended, "sinks": self.sinks,
                         "chance": self.chance, "summaries": self.tidy(), "patterns": chosen,
                         "seconds": self.seconds})

    def figure(self):
        """The first chosen head's pattern (head 0.0 when none is chosen)."""
        from interpscope.figures.heads import pattern_figure

        layer, head = (int(x) for x in (self.heads[0] if self.heads else "0.0").split("."))
        return pattern_figure(self.tokens, self.pattern(layer, head), self.excluded, f"Head {layer}.{head}",
                              self.sinks)

    def grid_figure(self, summary: str = "previous_token", shown: str | None = None):
        """Layers x heads coloured by one summary, its chance level in the title (click a cell to open it); the
        head `shown` ("L.H") outlined."""
        from interpscope.figures.heads import grid_figure

        return grid_figure(self.stats[summary], summary, self.chance.get(summary), shown=shown)


def head_patterns(lm: LoadedModel, text: str, *, heads: list[str] | None = None,
                  prepend_bos: bool | None = None) -> HeadPatterns:
    """Every head's attention pattern on `text` with the sinks measured and named (heads: "L.H" names whose full
    patterns the document carries). prepend_bos: put the model's BOS first (None: where the tokenizer adds none)."""
    from interpscope.capture import model_lock
    from interpscope.relevance.api import input_ids_for, model_kind
    from interpscope.relevance.sinks import report_from, watching
    from interpscope.sinks import words

    start = time.perf_counter()
    ids, prepended = input_ids_for(lm, text, prepend_bos)
    probe_before_last = lm.adapter.n_layers // 2 < lm.adapter.n_layers - 1  # interpscope.relevance.sinks' point
    with model_lock(lm), watching(lm.adapter) as seen:  # the sinks' middle residual from the same pass
        attn = attention_probabilities(lm, ids, stop=probe_before_last)[:, 0]  # [L, H, T, T]
    report = report_from(lm.adapter, seen["residual"], 0 if prepended else None)
    tokens = lm.token_strings(ids[0])
    sinks = report.rows(tokens, words(model_kind(lm.adapter))["sink"])
    pattern = attn.numpy()
    stats = summaries(pattern, [int(row["position"]) for row in sinks])
    result = HeadPatterns(model=lm.name, tokens=tokens, patterns=pattern.astype(np.float16), stats=stats,
                          chance=causal_chance(len(tokens)), sinks=sinks, bos_prepended=prepended,
                          seconds=time.perf_counter() - start)
    return result.with_heads(heads or [])
