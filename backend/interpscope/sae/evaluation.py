"""How good is an SAE on some text: sparsity, reconstruction, and what splicing it into the model costs.

- L0 = E||f||_0; MSE = E||x - x_hat||^2 / d_in; FVU = E||x - x_hat||^2 / E||x - E x||^2 (explained variance =
  1 - FVU); cosine = E cos(x, x_hat).
- Loss recovered = (CE_zero - CE_sae) / (CE_zero - CE_clean): CE_sae with x_hat spliced in at the hook,
  CE_zero with the activation zeroed, CE_clean untouched; KL = E KL(p_clean || p_sae) over next-token
  distributions. CE increase = CE_sae - CE_clean (nats per token) is reported beside it: zeroing the residual is
  so destructive (CE_zero ~ 15 nats on SmolLM2) that loss recovered compresses SAEs whose cost differs severalfold
  into 0.97..0.99.
- Shrinkage gamma = E||x_hat||^2 / E[x . x_hat] (< 1 means the SAE shrinks its reconstructions).
- Feature density = fraction of tokens where f > 0; dead = never fired here; dense = density > dense_threshold.
The first position of every context (the attention sink) is left untouched and out of every average, as in
training; so are the rare other rows with a massive activation (interpscope.sae.sinks, counted in `sink_tokens`),
which the SAE never saw in training and which would otherwise swamp MSE, FVU and gamma (two SmolLM2 tokens at ~150x
the median norm in 16k turn an FVU of 0.2 into 70). The next-token losses are averaged over every position.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from interpscope.capture import hooks, model_lock, resume_after
from interpscope.config import InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.sae.architectures import SparseAutoencoder
from interpscope.sae.documents import EvaluationDocument
from interpscope.sae.folder import check_compatible
from interpscope.scale.pool import Scale, Shard, batch_shards, map_shards
from interpscope.sinks import sink_rows

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

DENSE_THRESHOLD = 0.1


@dataclass
class SAEEvaluation(EvaluationDocument):
    """Evaluation figures of one SAE on n_tokens tokens (density is per feature)."""

    architecture: str
    hook_name: str
    model_name: str
    d_sae: int
    n_tokens: int
    l0: float
    fvu: float
    explained_variance: float
    mse: float
    cosine: float
    shrinkage: float
    ce_clean: float
    ce_sae: float
    ce_zero: float
    loss_recovered: float
    ce_increase: float
    kl: float
    dead_fraction: float
    dense_fraction: float
    dense_threshold: float
    sink_tokens: int
    density: np.ndarray = field(repr=False)
    log10_density_counts: np.ndarray = field(repr=False)
    log10_density_edges: np.ndarray = field(repr=False)

    def loss_sentence(self) -> str:
        """Loss recovered with what it is relative to, and the CE increase it can hide."""
        share = f" ({self.ce_increase / self.ce_clean:+.1%} of the clean loss)" if self.ce_clean > 0 else ""
        return (f"Loss recovered {self.loss_recovered:.3f} is measured against zero-ablating the activation "
                f"(CE {self.ce_zero:.3f} nats); splicing the SAE in raises the next-token loss by "
                f"{self.ce_increase:+.3f} nats over the clean model's {self.ce_clean:.3f}{share}.")

    def summary(self) -> dict:
        """The scalar figures (what `sae eval --json` prints, besides the histogram)."""
        skip = {"density", "log10_density_counts", "log10_density_edges"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}


def loss_recovered(ce_clean: float, ce_sae: float, ce_zero: float) -> float:
    """(CE_zero - CE_sae) / (CE_zero - CE_clean): 1 = as good as the clean model, 0 = as bad as zeroing."""
    gap = ce_zero - ce_clean
    return (ce_zero - ce_sae) / gap if gap != 0 else math.nan


def shrinkage(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """gamma = E||x_hat||^2 / E[x . x_hat]."""
    return float(x_hat.pow(2).sum(-1).mean() / (x * x_hat).sum(-1).mean())


def log10_density_histogram(density: np.ndarray, bins: int = 40, floor: float = 1e-7) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of log10(density) over features that fired at least once (dead ones are counted separately)."""
    alive = density[density > 0]
    low = math.floor(math.log10(max(floor, alive.min()))) if alive.size else -7
    edges = np.linspace(low, 0.0, bins + 1)
    counts, _ = np.histogram(np.log10(np.clip(alive, floor, 1.0)), bins=edges)
    return counts, edges


def _ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per-position next-token loss for positions 1..T-2 (positions whose activation may be replaced)."""
    return _ce_from(F.log_softmax(logits[:, 1:-1].double(), dim=-1), ids)


def _ce_from(logp: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The same loss from log-probabilities of positions 1..T-2 already computed (shared with the KL)."""
    return -logp.gather(-1, ids[:, 2:, None]).squeeze(-1)


def resume_block(adapter, hook: str) -> int | None:
    """The block whose output a hook is (blocks.L.hook_resid_post, or blocks.L.hook_resid_pre for L >= 1): spliced
    passes may then start after it (interpscope.capture.resume_after); None for hooks inside a block."""
    parts = hook.split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        layer = int(parts[1])
        if parts[2] == "hook_resid_post":
            return layer
        if parts[2] == "hook_resid_pre" and layer >= 1:
            return layer - 1
    return None


def evaluate_sae(lm: LoadedModel, sae: SparseAutoencoder, *, hook_name: str | None = None, n_tokens: int = 4096,
                 context_size: int = 128, batch_size: int = 4, source: str | None = None, split: str = "test",
                 ids: torch.Tensor | None = None, dense_threshold: float = DENSE_THRESHOLD,
                 progress: Callable[[int, int], None] | None = None, scale: Scale | None = None) -> SAEEvaluation:
    """Evaluate on ~n_tokens tokens of the corpus split (or on `ids` [N, T] given directly)."""
    return evaluate_saes(lm, [sae], hook_name=hook_name, n_tokens=n_tokens, context_size=context_size,
                         batch_size=batch_size, source=source, split=split, ids=ids,
                         dense_threshold=dense_threshold, progress=progress, scale=scale)[0]


@dataclass
class BatchTerms:
    """One batch's contribution to every sum of the evaluation (float64 numbers, added up in batch order; each a
    fixed_sum, so it has the same bits in a worker with one thread as in a process with many)."""

    ce_clean: float
    ce_zero: float
    n_ce: int
    n_rows: int
    n_sinks: int
    x_sum: torch.Tensor
    x_sq: float
    per_sae: list[dict[str, float]]
    fired: list[torch.Tensor]


class _Splice:
    """The clean, zero-ablated and spliced passes of one batch on one model and hook."""

    def __init__(self, lm: LoadedModel, hook: str):
        self.loaded, self.hook = lm, hook
        self.resume = resume_block(lm.adapter, hook)
        self.state: dict[str, torch.Tensor] = {}

    def clean(self, batch: torch.Tensor) -> torch.Tensor:
        def record(tensor: torch.Tensor):
            self.state["first"] = tensor[:, :1].detach()
            self.state["x"] = tensor[:, 1:].detach()
            self.state["sinks"] = sink_rows(self.state["x"])
            return None
        with hooks(self.loaded.adapter, {self.hook: record}):
            return self.loaded.model(input_ids=batch, use_cache=False).logits.cpu()

    def spliced(self, batch: torch.Tensor, replacement: torch.Tensor) -> torch.Tensor:
        """Logits with positions 1.. of the hook replaced; from the hook on only when the hook ends a block."""
        loaded, first = self.loaded, self.state["first"]
        replacement = replacement.to(device=loaded.device, dtype=first.dtype)
        if self.resume is not None:
            with resume_after(loaded.adapter, self.resume, torch.cat([first, replacement], 1)):
                return loaded.model(input_ids=batch, use_cache=False).logits.cpu()

        def splice(tensor: torch.Tensor):
            out = tensor.clone()
            out[:, 1:] = replacement.to(tensor.dtype)
            return out
        with hooks(loaded.adapter, {self.hook: splice}):
            return loaded.model(input_ids=batch, use_cache=False).logits.cpu()


def fixed_sum(tensor: torch.Tensor, axis: int | None = None):
    """Sum in float64 whose rounding does not depend on torch's thread count (numpy's pairwise summation, one
    thread): a worker with one thread gives the bits of a process with many. A float, or a tensor with `axis`."""
    total = np.sum(tensor.detach().double().cpu().numpy(), axis=axis)
    return float(total) if axis is None else torch.from_numpy(np.asarray(total))


def batch_terms(passes: _Splice, saes: list[SparseAutoencoder], batch: torch.Tensor) -> BatchTerms:
    """Every sum's term for one batch of windows [B, T] (the caller holds the model's lock)."""
    batch = batch.to(passes.loaded.device)
    targets = batch.cpu()
    clean_logits = passes.clean(batch)
    x_model, sinks = passes.state["x"], passes.state["sinks"]
    d_in = x_model.shape[-1]
    keep = ~sinks.reshape(-1).cpu()
    zero_logits = passes.spliced(batch, torch.where(sinks[..., None], x_model, torch.zeros_like(x_model)))
    p_log = F.log_softmax(clean_logits[:, 1:-1].double(), -1)
    p = p_log.exp()  # the clean distribution, once per batch for every SAE's KL
    del clean_logits
    ce_clean = _ce_from(p_log, targets)
    ce_zero = fixed_sum(_ce(zero_logits, targets))
    del zero_logits
    all_rows = x_model.reshape(-1, d_in).double().cpu()
    source = passes.state.get("source", x_model)  # what the SAE reads: the hook itself, or a transcoder's input
    in_rows = source.reshape(-1, source.shape[-1]).double().cpu()
    r = all_rows[keep]
    per_sae, fired = [], []
    for sae in saes:
        sae.eval()
        rows = all_rows.to(sae.W_enc.dtype)
        f = sae.encode(in_rows.to(sae.W_enc.dtype))
        x_hat_rows = sae.decode(f)
        x_hat_rows[~keep] = rows[~keep]
        sae_logits = passes.spliced(batch, x_hat_rows.reshape(x_model.shape))
        f, x_hat_rows = f[keep], x_hat_rows[keep]
        rh = x_hat_rows.double()
        q_log = F.log_softmax(sae_logits[:, 1:-1].double(), -1)
        del sae_logits
        per_sae.append({"l0": fixed_sum(f > 0), "err": fixed_sum((r - rh).pow(2)),
                        "cos": fixed_sum(F.cosine_similarity(r, rh, dim=-1)), "xhxh": fixed_sum(rh.pow(2)),
                        "xhx": fixed_sum(r * rh), "ce_sae": fixed_sum(_ce_from(q_log, targets)),
                        "kl": fixed_sum(p * (p_log - q_log))})
        fired.append(fixed_sum(f > 0, axis=0))
        del q_log
    return BatchTerms(ce_clean=fixed_sum(ce_clean), ce_zero=ce_zero, n_ce=ce_clean.numel(), n_rows=r.shape[0],
                      n_sinks=int((~keep).sum()), x_sum=fixed_sum(r, axis=0), x_sq=fixed_sum(r.pow(2)),
                      per_sae=per_sae, fired=fired)


@dataclass
class EvalJob:
    """What a worker (or this process) computes for one shard of an evaluation: each batch's terms."""

    saes: list[SparseAutoencoder]
    hook: str
    batch_size: int

    @torch.no_grad()
    def run(self, lm: LoadedModel, shard: Shard) -> list[BatchTerms]:
        passes = _Splice(lm, self.hook)
        windows = shard.payload
        with model_lock(lm):
            return [batch_terms(passes, self.saes, windows[k:k + self.batch_size])
                    for k in range(0, windows.shape[0], self.batch_size)]


class _Sums:
    """The running sums, added to batch by batch in batch order (the same float64 additions wherever the
    batches ran)."""

    KEYS = ("l0", "err", "cos", "xhx", "xhxh", "ce_sae", "kl")

    def __init__(self, saes: list[SparseAutoencoder]):
        d_in = saes[0].cfg.d_in
        self.values = [{k: 0.0 for k in self.KEYS} for _ in saes]
        self.fired = [torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for sae in saes]
        self.x_sum = torch.zeros(d_in, dtype=torch.float64)
        self.x_sq = self.ce_clean = self.ce_zero = 0.0
        self.n_rows = self.n_ce = self.n_sinks = 0

    def add(self, terms: BatchTerms) -> None:
        self.ce_clean += terms.ce_clean
        self.ce_zero += terms.ce_zero
        self.n_ce += terms.n_ce
        self.n_sinks += terms.n_sinks
        self.x_sum += terms.x_sum
        self.x_sq += terms.x_sq
        self.n_rows += terms.n_rows
        for values, fired, sae_terms, sae_fired in zip(self.values, self.fired, terms.per_sae, terms.fired,
                                                       strict=True):
            for key in self.KEYS:
                values[key] += sae_terms[key]
            fired += sae_fired


@torch.no_grad()
def evaluate_saes(lm: LoadedModel, saes: list[SparseAutoencoder], *, hook_name: str | None = None, n_tokens: int = 4096,
                  context_size: int = 128, batch_size: int = 4, source: str | None = None, split: str = "test",
                  ids: torch.Tensor | None = None, dense_threshold: float = DENSE_THRESHOLD,
                  progress: Callable[[int, int], None] | None = None,
                  scale: Scale | None = None) -> list[SAEEvaluation]:
    """Evaluate several SAEs reading the same hook on the same tokens: the clean and zero-ablated passes are
    shared, each SAE adds one spliced pass. When the hook is a block's output, the zero-ablated and spliced passes
    start after that block (the clean pass already computed everything before it) and each pass's
    log-probabilities are computed once for both its loss and the KL; the numbers are those of three full passes.
    progress(done, total) is called after each batch of windows (each shard on Ray).
    scale: run the batches on Ray workers (interpscope.scale); their terms are added here in batch order, so every
    number equals the single-process one exactly."""
    hooks_of = {check_compatible(sae, lm.adapter, hook_name, lm.name) for sae in saes}
    if len(hooks_of) != 1:
        raise InterpscopeError(f"evaluate_saes needs SAEs on one hook point; got {sorted(hooks_of)}.")
    hook = hooks_of.pop()
    if ids is None:
        ids = token_chunks(lm.tokenizer, context_size, n_tokens, source=source, split=split)
    sums = run_batches(lm, saes, EvalJob(saes, hook, batch_size), ids, batch_size, progress, scale)
    return _figures(lm, saes, hook, sums, dense_threshold)


def run_batches(lm: LoadedModel, saes: list[SparseAutoencoder], job, ids: torch.Tensor, batch_size: int,
                progress: Callable[[int, int], None] | None, scale: Scale | None, d_out: int | None = None) -> _Sums:
    """Run an evaluation job (EvalJob, TranscoderEvalJob) over the windows `ids` [N, T] in batches (on Ray when
    `scale` says so) and add the batches' terms in batch order, so every sum equals the single-process one.
    d_out: the width of what is reconstructed when it is not the SAE's input (a transcoder's output)."""
    if ids.dim() != 2 or ids.shape[1] < 3:
        raise InterpscopeError("Evaluation needs token windows of at least 3 tokens.")
    shards = [Shard(i, first, stop, ids[first:stop])
              for i, (first, stop) in enumerate(batch_shards(ids.shape[0], batch_size, scale))]
    results: dict[int, list[BatchTerms]] = {}

    def collect(shard: Shard, terms: list[BatchTerms]) -> None:
        results[shard.index] = terms
        if progress:
            progress(min(sum(s.stop - s.first for s in shards if s.index in results), ids.shape[0]), ids.shape[0])

    map_shards(job, shards, collect, lm=lm, scale=scale)
    sums = _Sums(saes)
    if d_out is not None:
        sums.x_sum = torch.zeros(d_out, dtype=torch.float64)
    for index in range(len(shards)):
        for terms in results[index]:
            sums.add(terms)
    return sums


def _figures(lm: LoadedModel, saes: list[SparseAutoencoder], hook: str, sums: _Sums,
             dense_threshold: float) -> list[SAEEvaluation]:
    n_rows, n_ce, d_in = sums.n_rows, sums.n_ce, saes[0].cfg.d_in
    total_var = sums.x_sq - float(sums.x_sum.pow(2).sum()) / n_rows
    ce_clean, ce_zero = sums.ce_clean / n_ce, sums.ce_zero / n_ce
    results = []
    for sae, v, fired in zip(saes, sums.values, sums.fired, strict=True):
        fvu = v["err"] / total_var if total_var > 0 else math.nan
        density = (fired / n_rows).numpy()
        counts, edges = log10_density_histogram(density)
        ce_sae = v["ce_sae"] / n_ce
        results.append(SAEEvaluation(
            architecture=sae.cfg.architecture, hook_name=hook, model_name=lm.name, d_sae=sae.cfg.d_sae,
            n_tokens=n_rows, l0=v["l0"] / n_rows, fvu=fvu, explained_variance=1 - fvu,
            mse=v["err"] / (n_rows * d_in), cosine=v["cos"] / n_rows,
            shrinkage=v["xhxh"] / v["xhx"] if v["xhx"] else math.nan,
            ce_clean=ce_clean, ce_sae=ce_sae, ce_zero=ce_zero,
            loss_recovered=loss_recovered(ce_clean, ce_sae, ce_zero), ce_increase=ce_sae - ce_clean,
            kl=v["kl"] / n_ce,
            dead_fraction=float((density == 0).mean()), dense_fraction=float((density > dense_threshold).mean()),
            dense_threshold=dense_threshold, sink_tokens=sums.n_sinks, density=density, log10_density_counts=counts,
            log10_density_edges=edges))
    return results


def text_windows(tokenizer, text: str, context_size: int = 128, max_tokens: int = 65536) -> torch.Tensor:
    """A person's text as [N, T] token windows for evaluate_sae (one shorter window if the text is short)."""
    from interpscope.corpus import token_stream

    ids = token_stream(tokenizer, [text], max_tokens=max_tokens)
    if ids.numel() < 3:
        raise InterpscopeError("The text is too short: evaluating an SAE needs at least 3 tokens.")
    if ids.numel() < context_size:
        return ids[None, :]
    n = ids.numel() // context_size
    return ids[: n * context_size].view(n, context_size)
