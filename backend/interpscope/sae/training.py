"""Train one or several SAEs from one shuffled activation buffer: each batch is read once and fed to every SAE.

Optimiser: Adam (beta1 = 0, beta2 = 0.999 by default, as in the Gated SAE paper), linear learning-rate warm-up
then constant, linear decay over the last `decay_fraction` of steps; sparsity coefficient warmed up linearly.
Decoder rows are kept at unit norm: the gradient's component along each row is projected out before the step
and rows are renormalised after it. Dead features (no activation for `dead_window_tokens`) are resampled at
chosen steps towards inputs the SAE reconstructs badly, for architectures that resample (`resample_dead`; those
with AuxK revive them themselves). Everything an architecture does beyond that it does in its own hooks:
`observe_dead` before its loss, `after_step` after the optimiser step (interpscope.sae.arch.base).
Checkpoints: <dir>/ckpt-<step>/<run>/ (SAE folder + optimizer.safetensors) and <dir>/latest.json, written last,
pointing to the newest complete one; training resumes from it, at the same place in the buffer. Every checkpoint
file is recorded in an output folder's marker (interpscope.outputs), and older checkpoints are deleted file by
file from that record: nothing else in the folder is ever removed.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from interpscope import atomic
from interpscope.outputs import OutputFolder
from interpscope.sae.activations import ShuffledBuffer
from interpscope.sae.architectures import SparseAutoencoder
from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE, load_sae, save_sae

CHECKPOINT_FILES = (CFG_FILE, WEIGHTS_FILE, "optimizer.safetensors", "history.json")


@dataclass
class TrainConfig:
    """Schedule and optimiser settings shared by every SAE in one training run."""

    total_tokens: int
    batch_size: int = 4096
    lr: float = 3e-4
    warmup_steps: int = 100
    decay_fraction: float = 0.2
    sparsity_warmup_fraction: float = 0.05
    beta1: float = 0.0
    beta2: float = 0.999
    eps: float = 1e-8
    resample_at: tuple[float, ...] = (0.25, 0.5)
    dead_window_tokens: int = 1_000_000
    log_every: int = 10
    checkpoint_every: int = 0
    seed: int = 0
    data_init: bool = True

    @property
    def total_steps(self) -> int:
        """Steps to see at least total_tokens (the last batch may overshoot; never fewer tokens than asked)."""
        return max(1, -(-self.total_tokens // self.batch_size))


@dataclass
class TrainRun:
    """One SAE being trained, with its sparsity coefficient (L1 / L0 weight; unused where the knob is k) and its
    history."""

    name: str
    sae: SparseAutoencoder
    sparsity: float = 1.0
    history: list[dict] = field(default_factory=list)
    last_fired: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # set per feature
    state: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    resampled: int = 0


Progress = Callable[[int, int, dict[str, dict]], None]


def _lr_at(cfg: TrainConfig, step: int) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup_steps))
    decay_start = int(cfg.total_steps * (1 - cfg.decay_fraction))
    if cfg.decay_fraction > 0 and step >= decay_start:
        warm *= max(0.0, (cfg.total_steps - step) / max(1, cfg.total_steps - decay_start))
    return cfg.lr * warm


def batch_fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Fraction of variance unexplained on this batch: sum ||x - x_hat||^2 / sum ||x - mean(x)||^2."""
    return float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum().clamp_min(1e-12))


class Trainer:
    """Runs the optimisation loop for several SAEs on one buffer; resumable from checkpoints."""

    def __init__(self, runs: list[TrainRun], buffer: ShuffledBuffer, cfg: TrainConfig,
                 checkpoint_dir: str | Path | None = None, output: OutputFolder | None = None):
        """checkpoint_dir lies inside `output` (the folder whose marker records the checkpoint files); without
        one, checkpoint_dir itself is claimed as an output folder."""
        self.runs = runs
        self.buffer = buffer
        self.cfg = cfg
        self.step = 0
        self.checkpoint_dir = Path(os.path.abspath(checkpoint_dir)) if checkpoint_dir else None
        self.output = output
        if self.checkpoint_dir is not None and output is None:
            self.output = OutputFolder.claim(self.checkpoint_dir, command="sae checkpoints")
        self.resample_steps = {int(f * cfg.total_steps) for f in cfg.resample_at if 0 < f < 1}
        for run in runs:
            run.last_fired = torch.zeros(run.sae.cfg.d_sae, dtype=torch.long)
            run.sae.train()

    # --- optimiser -------------------------------------------------------------------------------------
    @torch.no_grad()
    def _adam_step(self, run: TrainRun, lr: float) -> None:
        cfg = self.cfg
        sae = run.sae
        W_dec = sae.W_dec
        if W_dec.grad is not None:  # keep unit-norm rows: drop the radial part of the gradient
            W_dec.grad -= (W_dec.grad * W_dec).sum(1, keepdim=True) * W_dec
        for name, param in sae.named_parameters():
            if param.grad is None:
                continue
            state = run.state.setdefault(name, {"v": torch.zeros_like(param),
                                                "step": torch.zeros((), dtype=torch.long)})
            grad = param.grad
            state["step"] += 1
            t = int(state["step"])
            state["v"].mul_(cfg.beta2).addcmul_(grad, grad, value=1 - cfg.beta2)
            if cfg.beta1 > 0:
                m = state.setdefault("m", torch.zeros_like(param))
                m.mul_(cfg.beta1).add_(grad, alpha=1 - cfg.beta1)
                numerator = m / (1 - cfg.beta1 ** t)
            else:
                numerator = grad
            denom = (state["v"] / (1 - cfg.beta2 ** t)).sqrt_().add_(cfg.eps)
            param.addcdiv_(numerator, denom, value=-lr * sae.lr_scale.get(name, 1.0))
            param.grad = None
        W_dec.div_(W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8))

    @torch.no_grad()
    def _resample(self, run: TrainRun, x: torch.Tensor) -> int:
        """Re-initialise dead features towards inputs with large reconstruction error; reset their Adam state."""
        sae = run.sae
        if not sae.resample_dead:
            return 0
        window_steps = max(1, self.cfg.dead_window_tokens // self.cfg.batch_size)
        dead = (self.step - run.last_fired) >= window_steps
        dead_index = dead.nonzero().flatten()
        if dead_index.numel() == 0:
            return 0
        error = (x - sae(x)).pow(2).sum(-1)
        weights = error.pow(2) if float(error.pow(2).sum()) > 0 else torch.ones_like(error)
        pick = torch.multinomial(weights, dead_index.numel(), replacement=True,
                                 generator=torch.Generator().manual_seed(self.cfg.seed + self.step))
        alive = ~dead
        enc_norm = 0.2 * float(sae.W_enc[:, alive].norm(dim=0).mean()) if alive.any() else 1.0
        sae.reinit_features(dead_index, x[pick] - sae.b_dec, enc_norm)
        for name, state in run.state.items():
            for key in ("v", "m"):
                if key in state:
                    if name == "W_enc":
                        state[key][:, dead_index] = 0.0
                    elif state[key].dim() >= 1 and state[key].shape[0] == sae.cfg.d_sae:
                        state[key][dead_index] = 0.0
        run.last_fired[dead_index] = self.step
        run.resampled += int(dead_index.numel())
        return int(dead_index.numel())

    # --- loop ------------------------------------------------------------------------------------------
    def train(self, progress: Progress | None = None, stop: Callable[[], bool] | None = None) -> list[TrainRun]:
        """Train until total_tokens; call progress(step, total_steps, latest_log) every log_every steps."""
        cfg = self.cfg
        total = cfg.total_steps
        sparsity_warm = max(1, int(cfg.sparsity_warmup_fraction * total))
        window_steps = max(1, cfg.dead_window_tokens // cfg.batch_size)
        started = time.perf_counter()
        batches = self.buffer.batches()
        while self.step < total:
            x = next(batches)
            if self.step == 0 and self.cfg.data_init:
                for run in self.runs:
                    run.sae.init_from_batch(x)
            lr = _lr_at(cfg, self.step)
            ramp = min(1.0, (self.step + 1) / sparsity_warm)
            logs: dict[str, dict] = {}
            for run in self.runs:
                sae = run.sae
                sae.observe_dead((self.step - run.last_fired) >= window_steps)
                out = sae.loss(x, run.sparsity * ramp)
                out.total.backward()
                self._adam_step(run, lr)
                sae.after_step(out)
                with torch.no_grad():
                    fired = (out.features > 0).any(0)
                    run.last_fired[fired] = self.step
                    if (self.step + 1) % cfg.log_every == 0 or self.step + 1 == total:
                        entry = {"step": self.step + 1, "tokens": (self.step + 1) * cfg.batch_size,
                                 "loss": float(out.total), "l0": float((out.features > 0).float().sum(-1).mean()),
                                 "fvu": batch_fvu(sae.reconstruction_target(x), out.x_hat), "lr": lr,
                                 "dead_fraction": float(((self.step - run.last_fired) >= window_steps)
                                                        .float().mean()),
                                 "seconds": time.perf_counter() - started}
                        entry.update({k: float(v) for k, v in out.terms.items()})
                        run.history.append(entry)
                        logs[run.name] = entry
                if self.step in self.resample_steps:
                    self._resample(run, x)
            self.step += 1
            if logs and progress:
                progress(self.step, total, logs)
            if self.checkpoint_dir and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                self.save_checkpoint()
            if stop and stop():
                break
        if self.checkpoint_dir:
            self.save_checkpoint()
        for run in self.runs:
            run.sae.eval()
            run.sae.cfg.training_tokens = self.step * cfg.batch_size
        return self.runs

    # --- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Write ckpt-<step>/ for every run, then point latest.json at it and delete older checkpoints."""
        assert self.checkpoint_dir is not None and self.output is not None
        target = self.checkpoint_dir / f"ckpt-{self.step:07d}"
        for run in self.runs:
            run_dir = self.output.mkdir(target / run.name)
            run.sae.cfg.training_tokens = self.step * self.cfg.batch_size
            save_sae(run.sae, run_dir, dtype="float32")
            flat = {f"{name}.{key}": value.contiguous() for name, state in run.state.items()
                    for key, value in state.items()}
            flat["last_fired"] = run.last_fired
            atomic.write_bytes(run_dir / "optimizer.safetensors", save(flat))
            atomic.write_json(run_dir / "history.json", {"history": run.history, "resampled": run.resampled,
                                                         "sparsity": run.sparsity}, indent=None)
            self.output.record(*(run_dir / name for name in CHECKPOINT_FILES))
        latest = {"step": self.step, "folder": target.name, "batches_served": self.buffer.batches_served,
                  "runs": [run.name for run in self.runs]}
        atomic.write_json(self.checkpoint_dir / "latest.json", latest, indent=None)
        self.output.record(self.checkpoint_dir / "latest.json")
        for old in self.checkpoint_dir.glob("ckpt-*"):
            if old != target and self.output.owns(old):
                self.output.remove(old)
        return target

    def resume(self) -> bool:
        """Load the newest checkpoint in checkpoint_dir if there is one; True when resumed."""
        if not self.checkpoint_dir or not (self.checkpoint_dir / "latest.json").is_file():
            return False
        latest = json.loads((self.checkpoint_dir / "latest.json").read_text(encoding="utf-8"))
        folder = self.checkpoint_dir / latest["folder"]
        for run in self.runs:
            run_dir = folder / run.name
            loaded = load_sae(run_dir, dtype=run.sae.W_enc.dtype)
            run.sae.load_state_dict(loaded.state_dict())
            flat = load_file(str(run_dir / "optimizer.safetensors"))
            run.last_fired = flat.pop("last_fired")
            run.state = {}
            for key, value in flat.items():
                name, slot = key.rsplit(".", 1)
                run.state.setdefault(name, {})[slot] = value
            saved = json.loads((run_dir / "history.json").read_text(encoding="utf-8"))
            run.history, run.resampled = saved["history"], saved["resampled"]
        self.step = int(latest["step"])
        self.buffer.batches_served = int(latest["batches_served"])
        return True


def throughput(runs: list[TrainRun]) -> float:
    """Tokens per second of the whole run (all SAEs together), from the last history entry."""
    last = runs[0].history[-1] if runs and runs[0].history else None
    return float(last["tokens"] / last["seconds"]) if last and last["seconds"] > 0 else math.nan
