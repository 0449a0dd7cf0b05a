"""scripts/train_number_lm.py: its pretraining text is tokenised as written and never states a held-out sum."""
from __future__ import annotations

import importlib.util

import numpy as np

from interpscope.config import REPO_ROOT as ROOT
from interpscope.fourier.data import TEMPLATES, split_pairs
from interpscope.fourier.vocab import number_tokenizer

N_NUMBERS = 60


def _script():
    spec = importlib.util.spec_from_file_location("train_number_lm", ROOT / "scripts" / "train_number_lm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pretraining_sentences_encode_as_written_and_hide_the_held_out_pairs():
    script = _script()
    tokenizer = number_tokenizer(N_NUMBERS, TEMPLATES + script.EXTRA)
    vocab = tokenizer.get_vocab()
    held = {(int(a), int(b)) for split in ("valid", "test") for a, b in split_pairs(N_NUMBERS, split)}
    source = script.Sentences(N_NUMBERS, seed=0)
    stated, kinds = set(), set()
    for _ in range(3000):
        words = source.sentence()
        ids = [vocab[word] for word in words]
        assert tokenizer(" ".join(words), add_special_tokens=False).input_ids == ids
        kinds.add(words[1] if len(words) > 1 else words[0])
        if len(words) == 5 and words[1] in "+-" and words[3] == "=":
            x, y, z = int(words[0]), int(words[2]), int(words[4])
            a, b = (x, y) if words[1] == "+" else (z, y)
            assert a + b == (z if words[1] == "+" else x)
            stated |= {(a, b), (b, a)}
    assert not stated & held and len(stated) > 100
    assert {"+", "-", "mod", ":", "<", ">", "of", "digit", "even", "odd"} <= kinds  # every task appears
    batch = script.pretrain_batch(source, vocab, 4, 24, tokenizer.bos_token_id, vocab["."])
    assert batch.shape == (4, 24) and np.all(batch[:, 0].numpy() == tokenizer.bos_token_id)
