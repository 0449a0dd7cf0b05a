"""Mean ablation of MLP neurons: total effect vs direct effect on loss and entropy, the frozen-unigram
ablation and KL(model || unigram).

Ablating neuron n replaces its activation a_t by its corpus mean mu, changing the MLP's output by
(mu - a_t) w_out. Where the adapter declares a norm on the MLP's output (Gemma 3), the residual changes by
postnorm(m_t + (mu - a_t) w_out) - postnorm(m_t) instead, m_t the norm's input at that position.
Total effect: the model runs on (for a final-layer neuron the output norm and the final norm are recomputed on the
changed vectors, which is exact and needs no second forward pass). Direct effect: only the neuron's own write
along its direct path to the logits, every norm's scale frozen at its clean value (s_t of the final norm, r_t of
the output norm, r_t = 1 without one): logits + (mu - a_t) / (s_t r_t) * (gamma * centre(gamma_post * w_out)) W_U.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope import corpus
from interpscope.adapters import ModelAdapter
from interpscope.capture import capture, hooks, model_lock
from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.documents import AblationDocument
from interpscope.entropy_neurons.folding import (
    final_norm,
    mlp_pre_output,
    output_norm,
    output_norm_change,
    unembed_bias,
)
from interpscope.entropy_neurons.metrics import (
    freeze_unigram,
    loss_and_entropy,
    loss_entropy_kl,
    loss_of,
    norm_mediated_share,
)
from interpscope.entropy_neurons.page_store import corpus_means
from interpscope.entropy_neurons.postnorm import layer_post_scale
from interpscope.entropy_neurons.store import DEFAULT_STORE_TOKENS, Progress
from interpscope.entropy_neurons.unigram import token_counts, unigram_direction, unigram_log_probs
from interpscope.entropy_neurons.weights import check_k, neuron_stats

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass(frozen=True)
class Neuron:
    layer: int
    index: int

    @property
    def label(self) -> str:
        return f"{self.layer}.{self.index}"


def parse_neurons(specs, adapter: ModelAdapter) -> list[Neuron]:
    """Neurons from 'L.I' strings or (L, I) pairs, checked against the model; duplicates dropped."""
    neurons: list[Neuron] = []
    for spec in specs:
        if isinstance(spec, Neuron):
            layer, index = spec.layer, spec.index
        elif isinstance(spec, str):
            parts = spec.strip().split(".")
            if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() for p in parts):
                raise InterpscopeError(f"Neuron {spec!r} is not of the form LAYER.INDEX (e.g. 29.1187).")
            layer, index = int(parts[0]), int(parts[1])
        else:
            layer, index = (int(v) for v in spec)
        if layer < 0:
            layer += adapter.n_layers
        if not 0 <= layer < adapter.n_layers:
            raise InterpscopeError(f"Neuron {layer}.{index}: layer out of range 0..{adapter.n_layers - 1}.")
        if not 0 <= index < adapter.d_mlp:
            raise InterpscopeError(f"Neuron {layer}.{index}: index out of range 0..{adapter.d_mlp - 1}.")
        neuron = Neuron(layer, index)
        if neuron not in neurons:
            neurons.append(neuron)
    if not neurons:
        raise InterpscopeError("No neurons given: name at least one as LAYER.INDEX.")
    return neurons


def random_neurons(adapter: ModelAdapter, chosen: list[Neuron], n_random: int, seed: int = 0) -> list[Neuron]:
    """n_random neurons drawn from each layer of the chosen ones, never a chosen neuron itself."""
    generator = np.random.default_rng(seed)
    picked: list[Neuron] = []
    for layer in sorted({n.layer for n in chosen}):
        excluded = {n.index for n in chosen if n.layer == layer}
        pool = np.array([i for i in range(adapter.d_mlp) if i not in excluded])
        for index in generator.choice(pool, size=min(n_random, len(pool)), replace=False):
            picked.append(Neuron(layer, int(index)))
    return picked


@dataclass
class TokenEffects:
    """Per-token results over M predicted positions: activations and the changes (ablated - clean) of each
    neuron's ablation, [n_neurons, M]; clean loss / entropy / KL-to-unigram [M]."""

    neurons: list[Neuron]
    activation: np.ndarray
    clean_loss: np.ndarray
    clean_entropy: np.ndarray
    loss_total: np.ndarray
    loss_direct: np.ndarray
    entropy_total: np.ndarray
    entropy_direct: np.ndarray
    clean_kl_unigram: np.ndarray | None = None
    kl_unigram_ablated: np.ndarray | None = None
    loss_frozen_unigram: np.ndarray | None = None
    loss_direct_frozen_unigram: np.ndarray | None = None


def _mean_edit(index: int, value: float):
    def edit(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor[..., index] = value
        return tensor
    return edit


def token_effects(lm: LoadedModel, neurons: list[Neuron], tokens: torch.Tensor, means: dict[int, np.ndarray],
                  unigram_counts: np.ndarray | None = None, batch_size: int = 4, fast_final_layer: bool = True,
                  progress: Progress | None = None) -> TokenEffects:
    """Mean-ablate each neuron separately on token windows [N, T]; total and direct effects per position."""
    adapter = lm.adapter
    last = adapter.n_layers - 1
    norm = final_norm(adapter)
    W_U = adapter.W_U().detach()
    work = torch.float64 if W_U.dtype == torch.float64 else torch.float32
    gamma = norm.gamma.to(work)
    beta_logits = (norm.beta.to(W_U.dtype) @ W_U).to(work) if norm.beta is not None else 0.0
    bias = unembed_bias(adapter)
    constant = beta_logits + (bias.to(work) if bias is not None else 0.0)
    no_constant = isinstance(constant, float) and constant == 0.0
    layers = sorted({n.layer for n in neurons})
    posts = {layer: output_norm(adapter, layer) for layer in layers}
    write = {n: adapter.W_out(n.layer)[n.index].detach().to(work) for n in neurons}
    # a unit of activation's write into the residual before division by the output norm's scale (when there is one)
    residual_dir = {n: w if (post := posts[n.layer]) is None else post.gamma.to(work) * post.centre(w)
                    for n, w in write.items()}
    logit_dirs = {n: ((gamma * norm.centre(v)).to(W_U.dtype) @ W_U).to(work) for n, v in residual_dir.items()}
    unit_u = log_q = None
    if unigram_counts is not None:
        unit_u = unigram_direction(unigram_counts).to(device=W_U.device, dtype=work)
        log_q = torch.from_numpy(unigram_log_probs(unigram_counts)).to(device=W_U.device, dtype=work)
    last_post = posts.get(last) if fast_final_layer and any(n.layer == last for n in neurons) else None
    names = [f"blocks.{last}.hook_resid_post"] + [f"blocks.{layer}.mlp.hook_post" for layer in layers]
    keys = ["activation", "clean_loss", "clean_entropy", "loss_total", "loss_direct", "entropy_total",
            "entropy_direct", "clean_kl_unigram", "kl_unigram_ablated", "loss_frozen_unigram",
            "loss_direct_frozen_unigram"]
    parts: dict[str, list] = {key: [] for key in keys}
    n_windows = tokens.shape[0]
    with model_lock(lm), torch.no_grad():
        for start in range(0, n_windows, batch_size):
            batch = tokens[start:start + batch_size].to(lm.device)
            clean = capture(adapter, batch, names, to_cpu=False)
            logits = clean.require_logits().reshape(batch.shape[0], batch.shape[1], -1)[:, :-1].to(work)
            targets = batch[:, 1:]
            resid = clean.activations[names[0]].reshape(batch.shape[0], batch.shape[1], -1)[:, :-1].to(work)
            scale = norm.scale(resid)
            layer_acts = {layer: clean.activations[f"blocks.{layer}.mlp.hook_post"].reshape(
                batch.shape[0], batch.shape[1], -1)[:, :-1].to(work) for layer in layers}
            # each position's own output-norm input m and scale r: the direct path divides by r, the exact
            # total effect recomputes the norm on m + shift * w
            mlp_pre = {layer: mlp_pre_output(adapter, layer, layer_acts[layer]) for layer in layers
                       if posts[layer] is not None}
            post_scale = {layer: post.scale(m) for layer, m in mlp_pre.items() if (post := posts[layer]) is not None}
            if last_post is not None:
                normed_mlp = last_post.gamma.to(work) * last_post.centre(mlp_pre[last]) / post_scale[last].unsqueeze(-1)
                mlp_logits = ((gamma * norm.centre(normed_mlp)).to(W_U.dtype) @ W_U).to(work)
            loss0, entropy0, kl0 = loss_entropy_kl(logits, targets, log_q)
            parts["clean_loss"].append(loss0.flatten())
            parts["clean_entropy"].append(entropy0.flatten())
            if kl0 is not None:  # with log_q
                parts["clean_kl_unigram"].append(kl0.flatten())
            rows: dict[str, list[torch.Tensor]] = {key: [] for key in keys[3:] if key != "clean_kl_unigram"}
            acts_rows = []
            for neuron in neurons:
                acts = layer_acts[neuron.layer][..., neuron.index]
                shift = float(means[neuron.layer][neuron.index]) - acts
                post = posts[neuron.layer]
                # direct: the neuron's own write, every norm's scale frozen at its clean value
                frozen_scale = scale if post is None else scale * post_scale[neuron.layer]
                direct = logits + (shift / frozen_scale).unsqueeze(-1) * logit_dirs[neuron]
                if neuron.layer == last and fast_final_layer:
                    if post is None:
                        along_mlp, along_write = None, shift
                        change = shift.unsqueeze(-1) * write[neuron]
                    else:  # exact: postnorm(m + shift * w) - postnorm(m)
                        along_mlp, along_write = output_norm_change(post, mlp_pre[last], shift, write[neuron])
                        change = (along_mlp.unsqueeze(-1) * normed_mlp
                                  + along_write.unsqueeze(-1) * residual_dir[neuron])
                    new_scale = norm.scale(resid + change)
                    if no_constant:  # x - 0.0 and x + 0.0 are x: skip two passes over the vocabulary
                        total = ((scale / new_scale).unsqueeze(-1) * logits
                                 + (along_write / new_scale).unsqueeze(-1) * logit_dirs[neuron])
                    else:
                        total = ((scale / new_scale).unsqueeze(-1) * (logits - constant) + constant
                                 + (along_write / new_scale).unsqueeze(-1) * logit_dirs[neuron])
                    if along_mlp is not None:
                        total = total + (along_mlp / new_scale).unsqueeze(-1) * mlp_logits
                else:
                    edit = _mean_edit(neuron.index, float(means[neuron.layer][neuron.index]))
                    with hooks(adapter, {f"blocks.{neuron.layer}.mlp.hook_post": edit}):
                        out = lm.model(input_ids=batch, use_cache=False).logits
                    total = out[:, :-1].to(work)
                loss_t, entropy_t, kl_t = loss_entropy_kl(total, targets, log_q)
                loss_d, entropy_d = loss_and_entropy(direct, targets)
                acts_rows.append(acts.flatten())
                rows["loss_total"].append((loss_t - loss0).flatten())
                rows["loss_direct"].append((loss_d - loss0).flatten())
                rows["entropy_total"].append((entropy_t - entropy0).flatten())
                rows["entropy_direct"].append((entropy_d - entropy0).flatten())
                if unit_u is not None:
                    frozen = freeze_unigram(total, logits, unit_u)
                    rows["loss_frozen_unigram"].append((loss_of(frozen, targets) - loss0).flatten())
                    frozen = freeze_unigram(direct, logits, unit_u)
                    rows["loss_direct_frozen_unigram"].append((loss_of(frozen, targets) - loss0).flatten())
                    del frozen
                    if kl_t is not None:  # always here: unit_u and log_q come together
                        rows["kl_unigram_ablated"].append(kl_t.flatten())
            parts["activation"].append(torch.stack(acts_rows))
            for key, row in rows.items():
                if row:
                    parts[key].append(torch.stack(row))
            if progress:
                done = min(n_windows, start + batch_size)
                progress(done / n_windows, f"ablations on {done}/{n_windows} windows")

    def joined(key: str) -> np.ndarray | None:
        if not parts[key]:
            return None
        return torch.cat(parts[key], dim=-1).double().cpu().numpy()

    arrays = {key: array for key in keys if (array := joined(key)) is not None}  # the optional ones may be absent
    return TokenEffects(neurons=list(neurons), **arrays)


@dataclass
class NeuronEffect:
    """One neuron's mean-ablation effects (ablated - clean, averaged over tokens; *_abs = mean |change|)."""

    neuron: str
    layer: int
    index: int
    is_random: bool
    mean_activation: float
    loss_total: float
    loss_direct: float
    loss_total_abs: float
    loss_direct_abs: float
    entropy_total: float
    entropy_direct: float
    entropy_total_abs: float
    entropy_direct_abs: float
    norm_share: float | None
    norm_share_note: str
    rho: float
    norm: float
    loss_frozen_unigram: float | None = None
    loss_frozen_unigram_abs: float | None = None
    loss_direct_frozen_unigram_abs: float | None = None
    kl_unigram_ablated: float | None = None


@dataclass
class AblationResult(AblationDocument):
    """Effects of each chosen neuron (first) and of random neurons of the same layers, plus per-token data of
    the chosen ones: activation [n_chosen, M], clean entropy [M], entropy change (total) [n_chosen, M]."""

    model: str
    n_tokens: int
    k: int
    clean_loss: float
    clean_entropy: float
    clean_kl_unigram: float | None
    effects: list[NeuronEffect]
    activation: np.ndarray
    clean_entropy_per_token: np.ndarray
    entropy_total_per_token: np.ndarray
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def chosen(self) -> list[NeuronEffect]:
        return [e for e in self.effects if not e.is_random]

    def random(self) -> list[NeuronEffect]:
        return [e for e in self.effects if e.is_random]

    def control_sentence(self, quantity: str = "loss") -> str | None:
        """The sentence under the effects chart, about the quantity the chart shows ('loss': mean |Δ loss|,
        'entropy': mean |ΔH|): how far the chosen neurons move it against the random neurons of their layers. None
        without both kinds of row. (Issue 45.9: the chart showed |Δ loss| while the sentence spoke of entropy.)"""
        if quantity not in ("loss", "entropy"):
            raise ValueError(f"quantity is 'loss' or 'entropy', not {quantity!r}")
        chosen, random = self.chosen(), self.random()
        if not chosen or not random:
            return None
        mine = float(np.mean([getattr(e, f"{quantity}_total_abs") for e in chosen]))
        control = float(np.mean([getattr(e, f"{quantity}_total_abs") for e in random]))
        what, unit = ("the loss", "Δ loss|") if quantity == "loss" else ("the entropy", "ΔH|")
        numbers = f"(mean |{unit} {mine:.3g} vs {control:.3g} nats over {len(chosen)} chosen and {len(random)} random)"
        if control <= 1e-12:
            return f"The random neurons of these layers leave {what} unmoved, so there is no ratio {numbers}."
        return (f"The chosen neurons move {what} {mine / control:.1f}x as much as random neurons of their layers "
                f"{numbers}.")


def summarise(effects: TokenEffects, means: dict[int, np.ndarray], random_set: set[Neuron],
              weight_stats: dict[Neuron, tuple[float, float]]) -> list[NeuronEffect]:
    """NeuronEffect rows from per-token effects; the norm-mediated share is taken on mean |change in loss|."""
    rows = []
    for i, neuron in enumerate(effects.neurons):
        direct_abs = float(np.abs(effects.loss_direct[i]).mean())
        total_abs = float(np.abs(effects.loss_total[i]).mean())
        share, note = norm_mediated_share(direct_abs, total_abs)
        rho, norm = weight_stats[neuron]
        row = NeuronEffect(
            neuron=neuron.label, layer=neuron.layer, index=neuron.index, is_random=neuron in random_set,
            mean_activation=float(means[neuron.layer][neuron.index]),
            loss_total=float(effects.loss_total[i].mean()), loss_direct=float(effects.loss_direct[i].mean()),
            loss_total_abs=total_abs, loss_direct_abs=direct_abs,
            entropy_total=float(effects.entropy_total[i].mean()),
            entropy_direct=float(effects.entropy_direct[i].mean()),
            entropy_total_abs=float(np.abs(effects.entropy_total[i]).mean()),
            entropy_direct_abs=float(np.abs(effects.entropy_direct[i]).mean()),
            norm_share=share, norm_share_note=note, rho=rho, norm=norm)
        frozen, direct_frozen = effects.loss_frozen_unigram, effects.loss_direct_frozen_unigram
        if frozen is not None and direct_frozen is not None and effects.kl_unigram_ablated is not None:
            row.loss_frozen_unigram = float(frozen[i].mean())
            row.loss_frozen_unigram_abs = float(np.abs(frozen[i]).mean())
            row.loss_direct_frozen_unigram_abs = float(np.abs(direct_frozen[i]).mean())
            row.kl_unigram_ablated = float(effects.kl_unigram_ablated[i].mean())
        rows.append(row)
    return rows


def ablate(lm: LoadedModel, neurons, n_tokens: int = 2048, seq_len: int = 128, n_random: int = 8, seed: int = 0,
           k: int | None = None, source=None, mean_tokens: int | None = None, with_unigram: bool = True,
           batch_size: int = 4, progress: Progress | None = None) -> AblationResult:
    """Mean-ablate each neuron (and n_random random neurons of the same layers) over n_tokens held-out corpus
    tokens (split 'valid'); means come from the 'train' split with position 0 and sinks left out (the model's
    entropy-neuron store when it has them, else the cached activation store). Serves the Entropy neurons page's
    Causal ablation and Token-frequency tabs; progress(fraction, text) as the other neuron calls."""
    started = time.perf_counter()
    adapter = lm.adapter
    chosen = parse_neurons(neurons, adapter)
    randoms = random_neurons(adapter, chosen, n_random, seed)
    everyone = chosen + randoms
    layers = sorted({n.layer for n in everyone})
    k = check_k(k, adapter.d_model)

    def stage(lo: float, hi: float, label: str) -> Progress | None:
        return None if progress is None else (lambda frac, text: progress(lo + (hi - lo) * frac, f"{label}: {text}"))

    means = corpus_means(lm, layers, n_tokens=mean_tokens or DEFAULT_STORE_TOKENS, seq_len=seq_len, source=source,
                         split="train", progress=stage(0.0, 0.3, "mean activations"))
    counts = token_counts(lm.tokenizer, adapter.vocab_size, source=source) if with_unigram else None
    tokens = corpus.token_chunks(lm.tokenizer, seq_len, n_tokens, source=source, split="valid")
    effects = token_effects(lm, everyone, tokens, means, counts, batch_size=batch_size,
                            progress=stage(0.3, 1.0, "ablation"))
    weight_stats = {}
    for layer in layers:
        stats = neuron_stats(adapter, layer, k, post_scale=layer_post_scale(lm, layer))
        for n in everyone:
            if n.layer == layer:
                weight_stats[n] = (float(stats.rho[n.index]), float(stats.norm[n.index]))
    rows = summarise(effects, means, set(randoms), weight_stats)
    n_chosen = len(chosen)
    return AblationResult(
        model=lm.name, n_tokens=int(effects.clean_loss.size), k=k, clean_loss=float(effects.clean_loss.mean()),
        clean_entropy=float(effects.clean_entropy.mean()),
        clean_kl_unigram=None if effects.clean_kl_unigram is None else float(effects.clean_kl_unigram.mean()),
        effects=rows, activation=effects.activation[:n_chosen], clean_entropy_per_token=effects.clean_entropy,
        entropy_total_per_token=effects.entropy_total[:n_chosen], seconds=time.perf_counter() - started)
