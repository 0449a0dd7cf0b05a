"""What a token looks like on screen, everywhere tokens are shown (issue 45.10).

A byte-level BPE (GPT-2, SmolLM2) or a byte-fallback SentencePiece vocabulary (Llama, Gemma) has tokens that hold
part of a multi-byte UTF-8 character: one emoji is three or four such tokens. Decoded one at a time each gives the
replacement character "�", so a top-k list read "1. �, 4. �, 5. �" and a heatmap "���". token_text shows such a
token by its bytes instead, `<0xF0><0x9F>`, keeping whatever part of it is valid text (" <0xE2>" for a space and a
lead byte); a token that decodes cleanly is shown as it decodes. One position stays one token: a character split
over three tokens is three chips, each naming its bytes.
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from functools import lru_cache

REPLACEMENT = "\ufffd"
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _hex_bytes(error: UnicodeError):
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "".join(f"<0x{b:02X}>" for b in error.object[error.start:error.end]), error.end


codecs.register_error("interpscope-hex", _hex_bytes)


def show_bytes(data: bytes) -> str:
    """UTF-8 text of `data`, each byte that is not part of a valid character written as <0xNN>."""
    return data.decode("utf-8", errors="interpscope-hex")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (the printable stand-ins byte-level BPE vocabularies use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The raw bytes a token stands for, where its vocabulary says (byte-level BPE, SentencePiece byte fallback,
    SentencePiece pieces with '▁' for a space); None when it cannot be told."""
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    piece = convert(int(token_id)) if convert is not None else None
    if not isinstance(piece, str) or not piece:
        return None
    match = _BYTE_TOKEN.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    decoder = _byte_decoder()
    if all(ch in decoder for ch in piece):
        return bytes(decoder[ch] for ch in piece)
    if REPLACEMENT not in piece:  # a SentencePiece piece: its own text, '▁' standing for a space
        return piece.replace("\u2581", " ").encode("utf-8")
    return None


def token_text(tokenizer, token_id: int) -> str:
    """How one token is shown: its decoded text, or, where decoding it alone gives "�" for bytes of a split
    character, that text with those bytes as <0xNN>."""
    text = str(tokenizer.decode([int(token_id)]))
    if REPLACEMENT not in text:
        return text
    raw = token_bytes(tokenizer, token_id)
    if raw is None:
        return text
    shown = show_bytes(raw)
    return shown if REPLACEMENT not in shown or REPLACEMENT.encode() in raw else text


def token_texts(tokenizer, ids: Iterable[int]) -> list[str]:
    """token_text of every id."""
    return [token_text(tokenizer, int(i)) for i in ids]


def vocabulary_texts(tokenizer, size: int) -> list[str]:
    """token_text of ids 0..size-1 (decoded in one batch; only the tokens that come back as "�" are looked at)."""
    texts = [str(t) for t in tokenizer.batch_decode([[i] for i in range(size)])]
    return [token_text(tokenizer, i) if REPLACEMENT in text else text for i, text in enumerate(texts)]
