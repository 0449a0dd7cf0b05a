"""Checks on everything a person types or uploads, with messages meant for them."""
from __future__ import annotations

import codecs
import os

from backend.config import InterpscopeError

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_TOKENS_ENV = "INTERPSCOPE_MAX_TOKENS"
FALLBACK_TOKEN_CAP = 1024


def env_token_cap() -> int:
    """The token cap from $INTERPSCOPE_MAX_TOKENS (default 1024); a clear error when it is not a positive integer."""
    raw = os.environ.get(MAX_TOKENS_ENV, "").strip()
    if not raw:
        return FALLBACK_TOKEN_CAP
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InterpscopeError(f"{MAX_TOKENS_ENV}={raw[:40]!r} is not a positive whole number of tokens; "
                               f"unset it or set it to e.g. {FALLBACK_TOKEN_CAP}.")
    return value


def _import_token_cap() -> int:
    """The cap read once at import; a bad value falls back here and is reported by env_token_cap at use."""
    try:
        return env_token_cap()
    except InterpscopeError:
        return FALLBACK_TOKEN_CAP


DEFAULT_TOKEN_CAP = _import_token_cap()


def check_text(text: object) -> str:
    """Return the text if it is usable; raise a clear error for empty, non-text or binary input."""
    if text is None:
        raise InterpscopeError("The text is empty: type or upload some text first.")
    if not isinstance(text, str):
        raise InterpscopeError(f"Expected text, got {type(text).__name__}.")
    if not text.strip():
        raise InterpscopeError("The text is empty (only whitespace): type or upload some text first.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # only lone surrogates fail: text decoded with errors="surrogateescape" or similar
        raise InterpscopeError("The text contains invalid characters (lone UTF-16 surrogates): it was not "
                               "decoded correctly; save it as UTF-8 and try again.") from None
    if "\x00" in text:
        raise InterpscopeError("The text contains NUL bytes: it looks like a binary file, not text.")
    control = sum(1 for ch in text if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if control > max(8, len(text) // 100):
        raise InterpscopeError("The text is mostly control characters: it looks like a binary file, not text.")
    return text


def decode_bytes(data: bytes, name: str = "upload") -> str:
    """Decode an uploaded file as UTF-8 (or UTF-16 with a BOM); refuse binary and other encodings clearly."""
    if not data:
        raise InterpscopeError(f"{name} is empty.")
    if len(data) > MAX_UPLOAD_BYTES:
        raise InterpscopeError(
            f"{name} is {len(data) / 2**20:.1f} MiB; the limit is {MAX_UPLOAD_BYTES / 2**20:.0f} MiB.")
    if data.startswith(codecs.BOM_UTF16_LE) or data.startswith(codecs.BOM_UTF16_BE):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as err:
            raise InterpscopeError(
                f"{name} starts with a UTF-16 byte-order mark but is not valid UTF-16 ({err.reason} at byte "
                f"{err.start}): save it as UTF-8 and try again.") from None
    else:
        if b"\x00" in data[:8192]:
            raise InterpscopeError(f"{name} looks like a binary file (it contains NUL bytes), not text.")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InterpscopeError(
                f"{name} is not valid UTF-8 text (byte {err.start}): save it as UTF-8 and try again.") from None
    return check_text(text)


def check_token_count(n_tokens: int, cap: int) -> None:
    """Refuse an empty tokenisation or one over the cap; a bad $INTERPSCOPE_MAX_TOKENS is reported here too."""
    env_token_cap()
    if n_tokens == 0:
        raise InterpscopeError("The text produced no tokens.")
    if n_tokens > cap:
        raise InterpscopeError(
            f"The text is {n_tokens} tokens long; the limit here is {cap} tokens "
            f"(the model's context or INTERPSCOPE_MAX_TOKENS). Shorten the text.")


def parse_examples(data: bytes, filename: str, text_column: str | None = None) -> list[str]:
    """Examples from an upload (see backend.uploads.parse_table): one per line, CSV row or JSONL record."""
    from backend.uploads import parse_table

    return parse_table(data, filename, text_column=text_column).examples
