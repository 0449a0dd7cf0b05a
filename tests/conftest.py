"""Fixtures shared across areas (the bundled model, page exports, the planted-numbers model folder) and the settings
every test runs under: an offline hub and no Streamlit magic. The browser fixtures are in tests/ui/conftest.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit import config as streamlit_config

# Tests never touch the network: hub ids resolve from the local cache only (also in subprocesses and the app).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# AppTests run the pages as the server does: without Streamlit magic (scripts/serve_app.py says why)
streamlit_config.set_option("runner.magicEnabled", False)

ROOT = Path(__file__).resolve().parent.parent
N_NUMBERS = 100  # the numbers planted_folder's model knows


@pytest.fixture(scope="session")
def bundled_lm():
    """The bundled SmolLM2-135M, loaded once per test session (converted once per data dir)."""
    from interpscope.models import load_model

    return load_model("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture
def exports(monkeypatch) -> dict:
    """export key -> the page's JSON export (parsed), for every export_menu the pages call while the fixture lives."""
    import json
    import sys

    from components import export
    from components.export import data_json

    recorded: dict = {}
    original = export.export_menu

    def recording(fig, data, key, filename):
        if data is not None:
            recorded[key] = json.loads(data_json(data))
        return original(fig, data, key, filename)

    monkeypatch.setattr(export, "export_menu", recording)
    for name, module in list(sys.modules.items()):  # page helpers imported earlier hold their own reference
        if (name == "pages" or name.startswith(("pages.", "components."))) and \
                getattr(module, "export_menu", None) is not None:
            monkeypatch.setattr(module, "export_menu", recording)
    return recorded


@pytest.fixture(scope="module")
def planted_folder(tmp_path_factory):
    """A tiny GPT-2-config model over the numbers 0..N_NUMBERS-1 with planted period-10 and period-2 number
    embeddings, saved with its number tokenizer as a model folder."""
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from interpscope.fourier.vocab import number_tokenizer

    torch.manual_seed(0)
    tokenizer = number_tokenizer(N_NUMBERS)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.bos_token_id,
                        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config).double()
    x = np.arange(N_NUMBERS)
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(2, 64)) / 8
    planted = 1.0 * np.outer(np.cos(2 * np.pi * x / 10 + 0.3), directions[0]) + 0.7 * np.outer((-1.0) ** x,
                                                                                               directions[1])
    ids = [tokenizer.convert_tokens_to_ids(str(n)) for n in range(N_NUMBERS)]
    with torch.no_grad():
        weight = model.transformer.wte.weight
        weight[ids] = 0.02 * torch.randn(N_NUMBERS, 64, dtype=torch.float64) + torch.as_tensor(planted)
    folder = tmp_path_factory.mktemp("planted")
    model.float().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
