"""The graphs area's shared fixture: a tiny Llama model folder and a random transcoder set saved for it."""
from __future__ import annotations

import pytest

from interpscope.sae.transcoder_set import random_transcoder_set, save_transcoder_set
from tests.tiny import GPT2_VOCAB, tiny_llama


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Llama with the GPT-2 tokenizer saved as a model folder, and a random transcoder set for it."""
    from interpscope.models.loading import load_model
    from interpscope.models.tokenizers import gpt2_tokenizer

    root = tmp_path_factory.mktemp("graph")
    model_dir = root / "tiny-llama"
    tiny_llama(vocab=GPT2_VOCAB, seed=4).save_pretrained(model_dir)
    gpt2_tokenizer().save_pretrained(model_dir)
    lm = load_model(str(model_dir), device="cpu", dtype="float64")  # float64: thread counts change no ranking
    tset = random_transcoder_set(lm, 40, seed=1)
    save_transcoder_set(tset, root / "set", dtype="float32")
    return lm, model_dir, root / "set"
