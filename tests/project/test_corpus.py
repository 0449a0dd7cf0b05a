"""The bundled corpus and user corpora: deterministic disjoint splits, formats, token windows."""
from __future__ import annotations

import json

import pytest

from interpscope import corpus
from interpscope.config import InterpscopeError
from interpscope.models.tokenizers import gpt2_tokenizer


def test_bundled_splits_are_disjoint_and_stable():
    train, valid, test = (corpus.paragraphs(split=s) for s in ("train", "valid", "test"))
    assert len(train) > 5000 and len(valid) > 200 and len(test) > 200
    assert not set(test) & set(train) and not set(valid) & set(train) and not set(test) & set(valid)
    assert corpus.paragraphs(split="test") == test
    assert len(corpus.paragraphs(split="all")) == len(train) + len(valid) + len(test)


def test_sample_prompts_lengths():
    prompts = corpus.sample_prompts(50, min_words=12, max_words=40)
    assert len(prompts) == 50
    assert all(12 <= len(p.split()) <= 40 for p in prompts)


def test_token_chunks_cover_requested_tokens():
    tokenizer = gpt2_tokenizer()
    chunks = corpus.token_chunks(tokenizer, seq_len=64, n_tokens=64 * 10 + 5, split="valid")
    assert chunks.shape == (10, 64)
    assert int(chunks.max()) < len(tokenizer)


def test_user_files_and_folders(tmp_path):
    (tmp_path / "a.txt").write_text("One two three four five six seven eight nine.\n\nShort.\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "from jsonl"}) + "\n", encoding="utf-8")
    texts = corpus.paragraphs(tmp_path, split="all")
    assert texts == ["One two three four five six seven eight nine.", "from jsonl"]
    with pytest.raises(InterpscopeError, match="No corpus file"):
        corpus.paragraphs(tmp_path / "missing.txt")
    (tmp_path / "bad.jsonl").write_text("{not json}\n", encoding="utf-8")
    with pytest.raises(InterpscopeError, match="not valid JSON"):
        corpus.paragraphs(tmp_path / "bad.jsonl")
