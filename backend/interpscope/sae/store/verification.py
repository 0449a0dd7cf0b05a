"""Explanations that earn the name: every written explanation scored against its own random-explanation control,
with a per-feature interval; an explanation is *verified* only when the interval of its lead over the control lies
above 0, and only a verified one is shown as an explanation (issue 42).

Per feature: the positives are its held-out top contexts (ranks the writer did not see) and the negatives as many
windows of the store's corpus on which it never fires (explain.negative_pool), as `sae explain` scores. A scorer
gives each context a number from an explanation's text alone:
- `lexical`: 1 when the context holds a content word of the explanation (explain.simulate), else 0;
- `embedding`: the cosine between the mean-pooled hidden state (a middle block's residual stream) of the model the
  store reads, for the explanation and for the context: the model's own sentence encoder (no sentence-transformer
  installs offline here).
The score is the AUROC of those numbers, positives against negatives (ties count one half; for the lexical scorer it
equals the balanced accuracy `sae explain` reports). The control is the mean AUROC of `controls` explanations of
other features (sampled, not degenerate, other words) on the SAME contexts. The interval is a paired bootstrap over
contexts (positives and negatives resampled apart, the same draw for the explanation and its controls) of
score - control, 2.5th to 97.5th percentile. Verified: its low end is above 0.

Kept in the store folder as explanation_verification.json with the SHA-256 of the explanations file it was
measured on (a stale file counts as no verification); scripts/verify_explanations.py writes it for the stores.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from interpscope import atomic
from interpscope.outputs import OutputFolder
from interpscope.sae.store.explanations import EXPLANATIONS_FILE

VERIFICATION_FILE = "explanation_verification.json"
CONTROLS = 5
BOOTSTRAP = 1000
Scorer = Callable[[str, Sequence[str]], np.ndarray]  # (explanation, contexts) -> one number per context


def lexical_scorer(explanation: str, contexts: Sequence[str]) -> np.ndarray:
    from interpscope.sae.store.explain import simulate

    return np.array([float(simulate(explanation, c)) for c in contexts])


class EmbeddingScorer:
    """The model's own sentence encoder: the mean over tokens (position 0, the attention sink, left out) of the
    residual stream after block `layer` (default the middle one), L2-normalised; a context's score is its cosine with
    the explanation's. Embeddings are cached by text (contexts repeat across an explanation and its controls)."""

    def __init__(self, lm, layer: int | None = None, batch_size: int = 64):
        self.lm = lm
        n_layers = int(getattr(lm.model.config, "num_hidden_layers", 0) or 0)
        self.layer = layer if layer is not None else max(1, n_layers // 2)
        self.batch_size = batch_size
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        tokenizer = self.lm.tokenizer
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            tokenizer.padding_side = "right"
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            batch = tokenizer([(tokenizer.bos_token or "") + t for t in chunk], return_tensors="pt", padding=True,
                              add_special_tokens=False).to(self.lm.device)
            with torch.no_grad():
                hidden = self.lm.model(**batch, output_hidden_states=True).hidden_states[self.layer].float()
            mask = batch.attention_mask.clone().float()
            mask[:, 0] = 0.0  # the sink
            mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1.0)
            mean = torch.nn.functional.normalize(mean, dim=-1).cpu().numpy()
            for text, vector in zip(chunk, mean, strict=True):
                self.cache[text] = vector
        return np.stack([self.cache[t] for t in texts])

    def __call__(self, explanation: str, contexts: Sequence[str]) -> np.ndarray:
        vectors = self.embed([explanation, *contexts])
        return vectors[1:] @ vectors[0]


def auroc_pairs(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """[P, N]: 1 where a positive outscores a negative, 1/2 on a tie, 0 below."""
    diff = np.asarray(positive, float)[:, None] - np.asarray(negative, float)[None, :]
    return (diff > 0) + 0.5 * (diff == 0)


def bootstrap_auroc(pairs: np.ndarray, weights_pos: np.ndarray, weights_neg: np.ndarray) -> np.ndarray:
    """AUROC on each bootstrap draw, given each context's count in the draw ([B, P] and [B, N])."""
    total = weights_pos.sum(1) * weights_neg.sum(1)
    return np.einsum("bp,pn,bn->b", weights_pos, pairs, weights_neg) / total


def verify(own: tuple[np.ndarray, np.ndarray], controls: Sequence[tuple[np.ndarray, np.ndarray]],
           n_boot: int = BOOTSTRAP, seed: int = 0) -> dict:
    """An explanation's AUROC, its controls' mean AUROC and the 95% paired-bootstrap interval of the difference,
    from each explanation's (positive scores, negative scores) on the same contexts."""
    pos, neg = own
    n_pos, n_neg = len(pos), len(neg)
    rng = np.random.default_rng(seed)
    w_pos = np.stack([np.bincount(rng.integers(0, n_pos, n_pos), minlength=n_pos) for _ in range(n_boot)])
    w_neg = np.stack([np.bincount(rng.integers(0, n_neg, n_neg), minlength=n_neg) for _ in range(n_boot)])
    own_pairs = auroc_pairs(pos, neg)
    control_pairs = [auroc_pairs(p, n) for p, n in controls]
    score = float(own_pairs.mean())
    control = float(np.mean([c.mean() for c in control_pairs]))
    draws = bootstrap_auroc(own_pairs, w_pos, w_neg) - np.mean(
        [bootstrap_auroc(c, w_pos, w_neg) for c in control_pairs], axis=0)
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"score": score, "control": control, "low": float(low), "high": float(high), "verified": bool(low > 0)}


def control_features(feature: int, candidates: Sequence[int], entries: dict[int, dict], n: int,
                     rng: np.random.Generator) -> list[int]:
    """Up to n other features whose explanation is not degenerate and shares no content word with this one's."""
    from interpscope.sae.store.wording import content_words

    own = content_words(entries[feature].get("explanation", ""))
    picked: list[int] = []
    for other in rng.permutation(np.asarray(candidates)):
        other = int(other)
        words = content_words(entries[other].get("explanation", ""))
        if other != feature and words and not words & own:
            picked.append(other)
            if len(picked) == n:
                break
    return picked


def verify_store(store, pool: tuple[list[str], np.ndarray], scorer: Scorer = lexical_scorer,
                 scorer_name: str = "lexical", features: Sequence[int] | None = None, controls: int = CONTROLS,
                 n_boot: int = BOOTSTRAP, seed: int = 0,
                 progress: Callable[[int, int], None] | None = None) -> dict:
    """Verify the store's written explanations (or `features` of them): the document explanation_verification.json
    holds (see the module docstring). Degenerate explanations and features without held-out positives or negatives
    are not verified and are listed apart."""
    from interpscope.sae.store.explain import held_out_positives
    from interpscope.sae.store.wording import is_degenerate

    texts, peak = pool
    entries = store.explanations
    usable = [f for f in sorted(entries) if not is_degenerate(entries[f].get("explanation", ""))]
    wanted = [int(f) for f in (features if features is not None else sorted(entries))]
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"feature": [], "score": [], "control": [], "low": [], "high": []}
    skipped: dict[str, list[int]] = {"degenerate": [], "no_contexts": []}
    for done, feature in enumerate(wanted, start=1):
        if progress:
            progress(done, len(wanted))
        if is_degenerate(entries[feature].get("explanation", "")):
            skipped["degenerate"].append(feature)
            continue
        positives = held_out_positives(store, feature)
        negatives = [t for t, v in zip(texts, peak[:, feature], strict=True) if v <= 0][:len(positives)]
        others = control_features(feature, usable, entries, controls, rng)
        if not positives or not negatives or not others:
            skipped["no_contexts"].append(feature)
            continue
        contexts = positives + negatives

        def scored(text: str, contexts: list[str] = contexts, n: int = len(positives)) -> tuple[np.ndarray, np.ndarray]:
            values = scorer(text, contexts)
            return values[:n], values[n:]
        result = verify(scored(entries[feature]["explanation"]),
                        [scored(entries[o]["explanation"]) for o in others], n_boot, seed + feature)
        rows["feature"].append(feature)
        for key in ("score", "control", "low", "high"):
            rows[key].append(round(result[key], 4))
    verified = int(sum(low > 0 for low in rows["low"]))
    return {"scorer": scorer_name, "controls": controls, "bootstrap": n_boot, "seed": seed, "verified": verified,
            "tested": len(rows["feature"]), "written": len(entries), "skipped": skipped, "rows": rows,
            "explanations_sha256": explanations_digest(store.folder)}


def explanations_digest(folder: str | Path) -> str | None:
    path = Path(folder) / EXPLANATIONS_FILE
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def write_verification(store, document: dict) -> Path:
    """Keep a verification beside the explanations it was measured on (recorded in the folder's marker)."""
    owned = OutputFolder.claim(store.folder, force=True, command="explanation verification")
    path = Path(store.folder) / VERIFICATION_FILE
    atomic.write_json(path, document, indent=None)
    owned.record(VERIFICATION_FILE)
    return path


def read_verification(store) -> dict | None:
    """The store's verification when it was measured on its current explanations, else None."""
    try:
        saved = json.loads((Path(store.folder) / VERIFICATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("explanations_sha256") != explanations_digest(store.folder):
        return None
    return saved


def verified_features(document: dict | None) -> dict[int, dict]:
    """{feature: {"score", "control", "low", "high", "verified"}} from a verification document ({} for None)."""
    if not document:
        return {}
    rows = document.get("rows") or {}
    out = {}
    for i, feature in enumerate(rows.get("feature", [])):
        entry = {key: float(rows[key][i]) for key in ("score", "control", "low", "high")}
        out[int(feature)] = {**entry, "verified": entry["low"] > 0}
    return out


def verification_text(row: dict, scorer: str) -> str:
    """'AUROC 0.95 vs 0.52 for random explanations; lead [0.30, 0.55] (lexical scorer)'."""
    return (f"AUROC {row['score']:.2f} vs {row['control']:.2f} for other features' explanations on the same contexts;"
            f" lead 95% interval [{row['low']:+.2f}, {row['high']:+.2f}] ({scorer} scorer)")
