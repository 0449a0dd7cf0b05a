"""The architecture registry: every fact an architecture owns comes from its class, and a new architecture trains,
saves and loads with nothing but its class and a registration (the trainer, pipeline, folder format and command
line have no per-architecture branches)."""
from __future__ import annotations

import json

import pytest
import torch

from interpscope.sae import SAEConfig, build_sae, load_sae, registered, save_sae
from interpscope.sae.arch import registry
from interpscope.sae.arch.base import Knob, LossTerms, PerFeature, squared_error
from interpscope.sae.arch.standard import StandardSAE

D_IN, D_SAE = 12, 40


def _x(n: int = 64, seed: int = 2) -> torch.Tensor:
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_registry_names_are_unique_and_every_class_declares_its_facts():
    classes = registered()
    assert [cls.architecture for cls in classes][:4] == ["standard", "gated", "topk", "jumprelu"]
    names = [name for cls in classes for name in {cls.architecture, *cls.aliases}]
    assert len(names) == len(set(names))
    for cls in classes:
        assert registry.canonical_architecture(cls.short_name) == cls.architecture
        assert cls.label and cls.folder_architecture and cls.knob.default > 0
        sae = build_sae(SAEConfig(d_in=D_IN, d_sae=D_SAE, architecture=cls.short_name, k=4))
        assert set(sae.state_dict()) == set(cls.tensor_shapes(sae.cfg))
    with pytest.raises(ValueError, match="taken"):
        registry.register(StandardSAE)


class _AbsReLU(StandardSAE):
    """A test-only architecture, f = |pre| with an L1 penalty, declared only in its class."""

    architecture = "absrelu"
    aliases = ("absrelu",)
    short_name = "absrelu"
    label = "Abs (L1)"
    knob = Knob("l1", "L1 coefficient", 2.0)
    selected_by_default = False
    per_feature = {"b_enc": PerFeature(reset=0.25)}
    density_bias = None
    folder_architecture = "absrelu"

    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        return (sae_in @ self.W_enc + self.b_enc).abs()

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        f = (self.centred(x) @ self.W_enc + self.b_enc).abs()
        x_hat = f @ self.W_dec + self.b_dec
        recon = squared_error(x, x_hat)
        return LossTerms(recon + coefficient * f.sum(-1).mean(), {"recon": recon}, f, x_hat)


class _Buffer:
    batches_served = 0

    def batches(self):
        gen = torch.Generator().manual_seed(0)
        while True:
            yield torch.randn(32, D_IN, generator=gen)


def test_a_new_architecture_needs_only_its_class_and_a_registration(tmp_path, monkeypatch):
    from interpscope.cli.sae_cmd import _knob_help
    from interpscope.sae.pipeline import SAESpec, make_runs
    from interpscope.sae.training import TrainConfig, Trainer

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    registry.register(_AbsReLU)
    spec = SAESpec("absrelu", D_SAE)
    assert spec.coefficient == 2.0 and spec.run_name() == "absrelu-40-l2"
    assert "absrelu" in _knob_help()[0] and "for absrelu (default 2)" in _knob_help()[1]
    runs = make_runs([SAESpec("absrelu", D_SAE, 0.01)], D_IN, "m", "blocks.0.hook_resid_post", 32, "austen")
    Trainer(runs, _Buffer(), TrainConfig(total_tokens=32 * 30, batch_size=32, lr=1e-2, warmup_steps=2,
                                          resample_at=(0.5,), dead_window_tokens=32)).train()
    history = runs[0].history
    assert history[-1]["recon"] < history[0]["recon"]
    folder = save_sae(runs[0].sae, tmp_path / "a")
    loaded = load_sae(folder)
    assert type(loaded) is _AbsReLU and json.loads((folder / "cfg.json").read_text())["architecture"] == "absrelu"
    x = _x().float()
    torch.testing.assert_close(loaded(x), runs[0].sae(x))
