"""A tiny GPT-2 with a small random SAE on its residual stream, saved as an SAE folder, for store tests."""
from __future__ import annotations

from pathlib import Path

import torch

from interpscope.capture import model_lock
from interpscope.corpus import token_chunks
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.sae import SAEConfig, build_sae, save_sae
from interpscope.sae.store.encode import hook_activations
from tests.tiny import loaded as wrap_loaded
from tests.tiny import tiny_gpt2

HOOK = "blocks.0.hook_resid_post"


def tiny_lm(seed: int = 0):
    """A 2-layer GPT-2 (d_model 32) with the real GPT-2 tokenizer, as a LoadedModel on CPU."""
    return wrap_loaded(tiny_gpt2(seed=seed), gpt2_tokenizer(), name="tiny-gpt2")


def save_tiny_lm(folder: Path, seed: int = 0) -> Path:
    """The tiny GPT-2 and its tokenizer saved as a local model folder, so the app and command line load it by path."""
    lm = tiny_lm(seed)
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return Path(folder)


def random_sae_folder(lm, folder: Path, d_sae: int = 48, arch: str = "standard", seed: int = 3,
                      hook: str = HOOK) -> Path:
    """A random SAE whose features fire on ~1-20% of tokens, saved to folder.

    Encoder biases are set from the model's own activations on a sample of the corpus: feature i's bias is minus
    a per-feature quantile (80th-99th) of its pre-activation, so densities span a range.
    """
    d_in = lm.adapter.d_model
    cfg = SAEConfig(d_in=d_in, d_sae=d_sae, architecture=arch, model_name=lm.name, hook_name=hook,
                    hook_layer=int(hook.split(".")[1]))
    sae = build_sae(cfg, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    sample = token_chunks(lm.tokenizer, 64, 2048, split="valid")
    with model_lock(lm):
        x = hook_activations(lm, hook, sample)[:, 1:].reshape(-1, d_in).float()
    with torch.no_grad():
        pre = x @ sae.W_enc
        levels = 0.80 + 0.19 * torch.rand(d_sae, generator=generator)
        cut = torch.stack([pre[:, i].quantile(float(levels[i])) for i in range(d_sae)])
        if arch == "gated":
            sae.b_gate.copy_(-cut)
            sae.b_mag.copy_(-cut * 0.5)
        else:
            sae.b_enc.copy_(-cut)
    return save_sae(sae, folder)


def isolated_data(root: Path):
    """A MonkeyPatch pointing the data dir at root/data and hiding the shipped stores (undo() when done)."""
    import pytest

    from interpscope.sae.store import layout

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(root / "data"))
    monkeypatch.setattr(layout.FEATURE_STORES, "shipped", root / "no-shipped-stores")
    return monkeypatch
