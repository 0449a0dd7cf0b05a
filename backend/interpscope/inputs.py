"""Checks on everything a person types or uploads, with messages meant for them."""
from __future__ import annotations

import codecs
import os

from interpscope.config import InterpscopeError

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


def check_token_count(n_tokens: int, cap: int, source: str | None = None) -> None:
    """Refuse an empty tokenisation or one over the cap; a bad $INTERPSCOPE_MAX_TOKENS is reported here too.
    `source` names where the cap comes from when a view sets its own (the default: the model's context or
    INTERPSCOPE_MAX_TOKENS), so the message never blames a setting that is not the one in force."""
    env_token_cap()
    if n_tokens == 0:
        raise InterpscopeError("The text produced no tokens.")
    if n_tokens > cap:
        where = source or "the model's context or INTERPSCOPE_MAX_TOKENS"
        raise InterpscopeError(
            f"The text is {n_tokens} tokens long; the limit here is {cap} tokens ({where}). Shorten the text.")


def sink_token_id(tokenizer) -> int | None:
    """The token a model is trained to see first (its BOS), which then takes the attention sink; None if none."""
    token_id = getattr(tokenizer, "bos_token_id", None)
    return int(token_id) if token_id is not None else None


def tokenizer_adds_bos(tokenizer) -> bool:
    """Whether encoding a text already puts the BOS token first (Gemma's tokenizer does, SmolLM2's does not)."""
    bos = sink_token_id(tokenizer)
    if bos is None:
        return False
    ids = tokenizer("a").input_ids
    return bool(ids) and int(ids[0]) == bos


def default_prepend_bos(tokenizer, has_attention: bool = True, prefix_id: int | None = None) -> bool:
    """The default of the prepend-BOS option: on where there is a token to prepend (the model's measured prefix,
    else the tokenizer's BOS) and the tokenizer adds none itself, and the model has attention (attention puts its
    sink on the first token; a state-space model has no sink to give it)."""
    token = prefix_id if prefix_id is not None else sink_token_id(tokenizer)
    return has_attention and token is not None and not tokenizer_adds_bos(tokenizer)


def with_bos(input_ids, tokenizer, prepend: bool | None = None, has_attention: bool = True,
             prefix_id: int | None = None):
    """(ids [1, T'], prepended) with the prefix token (`prefix_id`, else the tokenizer's BOS) put before input_ids
    [1, T] when `prepend` (None: the default, default_prepend_bos) and the ids do not already start with it;
    prepended is True when a token was added (it is then position 0: shown and named, never ranked nor setting a
    colour scale)."""
    import torch

    want = default_prepend_bos(tokenizer, has_attention, prefix_id) if prepend is None else bool(prepend)
    bos = prefix_id if prefix_id is not None else sink_token_id(tokenizer)
    if not want or bos is None or (input_ids.shape[1] and int(input_ids[0, 0]) == bos):
        return input_ids, False
    head = torch.full((input_ids.shape[0], 1), bos, dtype=input_ids.dtype, device=input_ids.device)
    return torch.cat([head, input_ids], dim=1), True


def input_ids_for(lm, text: str, prepend_bos: bool | None = None,
                  max_tokens: int | None = None):
    """The one way a person's text becomes a model's input: (ids [1, T], prepended), the text's tokens with the
    model's prefix token (LoadedModel.prefix_token_id: measured per bundled model, else its BOS) put first when
    `prepend_bos` (None: default_prepend_bos). Every command, page and API call that runs a model on a person's
    text goes through here, so they run the same tokens and agree on the prediction."""
    ids = lm.encode(text, max_tokens=max_tokens)
    prefix = getattr(lm, "prefix_token_id", None)
    ids, prepended = with_bos(ids, lm.tokenizer, prepend_bos, "attention" in lm.adapter.capabilities(), prefix)
    if prepended:
        source = lm.cap_source(max_tokens) if hasattr(lm, "cap_source") else None
        check_token_count(int(ids.shape[1]), max_tokens or lm.token_cap, source)
    return ids, prepended
