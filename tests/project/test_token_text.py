"""Tokens holding part of a multi-byte character are shown by their bytes everywhere tokens are shown (45.10):
Home's top-k read "1. �, 4. �" and relevance chips "���"."""
from __future__ import annotations

import re

import pytest

import interpscope
from interpscope.token_text import show_bytes, token_text, token_texts

EMOJI = "I love 🐱 and 日本"
BYTES = re.compile(r"<0x([0-9A-F]{2})>")


def as_bytes(shown: str) -> bytes:
    """Invert the display: text back to UTF-8, each <0xNN> back to its byte."""
    out, last = b"", 0
    for match in BYTES.finditer(shown):
        out += shown[last:match.start()].encode("utf-8") + bytes([int(match.group(1), 16)])
        last = match.end()
    return out + shown[last:].encode("utf-8")


def test_show_bytes_keeps_valid_text_and_names_the_rest():
    assert show_bytes(" caf\xc3\xa9".encode("latin-1")) == " café"
    assert show_bytes(b" \xf0\x9f") == " <0xF0><0x9F>"
    assert show_bytes(b"\xb1ok") == "<0xB1>ok"


class ByteFallback:
    """A SentencePiece-style tokenizer with byte fallback (Llama, Gemma): pieces <0xF0> for bytes, '▁' a space."""

    pieces = ["<0xF0>", "<0x9F>", "▁cat", "hello"]

    def decode(self, ids):
        text = "".join(self.pieces[i] for i in ids)
        raw = b""
        for part in re.split(r"(<0x[0-9A-F]{2}>)", text):
            raw += bytes([int(part[3:5], 16)]) if BYTES.fullmatch(part) else part.replace("▁", " ").encode()
        return raw.decode("utf-8", errors="replace")

    def convert_ids_to_tokens(self, token_id):
        return self.pieces[token_id]


def test_byte_fallback_pieces_show_their_byte():
    tokenizer = ByteFallback()
    assert tokenizer.decode([0]) == "\ufffd"  # what every view printed
    assert token_texts(tokenizer, [0, 1, 2, 3]) == ["<0xF0>", "<0x9F>", " cat", "hello"]


@pytest.mark.bundled
def test_the_bundled_tokenizer_shows_split_characters_by_their_bytes(bundled_lm):
    ids = bundled_lm.tokenizer.encode(EMOJI, add_special_tokens=False)
    plain = [bundled_lm.tokenizer.decode([i]) for i in ids]
    assert sum("\ufffd" in p for p in plain) >= 3  # the bug: several tokens print as "�"
    shown = bundled_lm.token_strings(ids)
    assert not any("\ufffd" in s for s in shown)
    assert b"".join(as_bytes(s) for s in shown).decode("utf-8") == EMOJI  # nothing lost: the bytes are the text
    assert [s for s, p in zip(shown, plain, strict=True) if "\ufffd" not in p] == \
        [p for p in plain if "\ufffd" not in p]  # clean tokens unchanged
    assert token_text(bundled_lm.tokenizer, ids[0]) == "I"


@pytest.mark.bundled
def test_top_k_and_relevance_chips_show_bytes(bundled_lm):
    text = "The cat emoji is 🐱 and the dog emoji is"
    top = interpscope.predict(bundled_lm, text, top=50).to_dict()["predictions"]
    assert not any("\ufffd" in row["token"] for row in top)
    assert any(BYTES.search(row["token"]) for row in top)  # the model does predict a lead byte here
    relevance = interpscope.explain(bundled_lm, text, "gradxinput", top=0).to_dict()
    assert not any("\ufffd" in token for token in relevance["tokens"])
    assert any(BYTES.search(token) for token in relevance["tokens"])


@pytest.mark.bundled
def test_the_shipped_feature_stores_show_bytes_not_replacement_characters():
    from interpscope.config import ASSETS_DIR
    from interpscope.sae.store import FeatureStore

    for folder in sorted((ASSETS_DIR / "sae_stores").iterdir()):
        store = FeatureStore(folder)
        assert sum("\ufffd" in t for t in store.vocab) <= 1, folder  # one vocabulary entry is the character itself
        assert not any("\ufffd" in label for label in store.labels), folder
