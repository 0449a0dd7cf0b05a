"""English text for everything that needs a corpus: the bundled Jane Austen novels, or a person's own files.

Paragraphs are reflowed (hard line breaks joined) and split deterministically into train / valid / test by a
hash of their position, so every method sees the same held-out text.
"""
from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Literal

import torch

from interpscope.config import ASSETS_DIR, InterpscopeError, artefact_hint
from interpscope.inputs import decode_bytes
from interpscope.paths import confined, display_path
from interpscope.uploads import parse_examples

Split = Literal["train", "valid", "test", "all"]
BUNDLED_DIR = ASSETS_DIR / "corpus" / "austen"
_MIN_WORDS = 8


def _reflow(text: str) -> list[str]:
    """Paragraphs with internal line breaks joined; headings and very short lines dropped."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        para = " ".join(line.strip() for line in block.splitlines() if line.strip())
        if len(para.split()) >= _MIN_WORDS:
            paragraphs.append(para)
    return paragraphs


def _split_of(key: str) -> str:
    bucket = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100
    return "test" if bucket < 5 else "valid" if bucket < 10 else "train"


@lru_cache(maxsize=1)
def _bundled_paragraphs() -> tuple[tuple[str, str], ...]:
    files = sorted(BUNDLED_DIR.glob("*.txt.gz"))
    if not files:
        raise InterpscopeError(f"The bundled corpus is missing from {BUNDLED_DIR}: "
                               f"{artefact_hint('bash scripts/build_corpus.sh')}.")
    out = []
    for file in files:
        text = gzip.decompress(file.read_bytes()).decode("utf-8", errors="replace")
        for i, para in enumerate(_reflow(text)):
            out.append((f"{file.stem}:{i}", para))
    return tuple(out)


def _read_source(path: Path) -> list[str]:
    """Texts from a .txt/.md file (paragraphs), a .jsonl file ("text" field) or a folder of those. On a shared
    server the path and every file found in a folder are confined to the allowed folders by their resolved path
    (a symlink leading outside is refused, never read)."""
    path = confined(path, "corpus file or folder")
    if path.is_dir():
        texts: list[str] = []
        for child in sorted(path.rglob("*")):
            if child.suffix.lower() in (".txt", ".md", ".jsonl") and child.is_file():
                confined(child, f"corpus folder's file {child.relative_to(path).as_posix()!r}")
                texts.extend(_read_source(child))
        if not texts:
            raise InterpscopeError(f"No .txt, .md or .jsonl files with text under {display_path(path)}.")
        return texts
    if not path.is_file():
        raise InterpscopeError(f"No corpus file or folder at {display_path(path)}.")
    if path.suffix.lower() == ".jsonl":
        return parse_examples(path.read_bytes(), path.name)
    text = decode_bytes(path.read_bytes(), name=path.name)
    return _reflow(text) or [text]


def paragraphs(source: str | Path | None = None, split: Split | str = "train") -> list[str]:
    """Paragraphs of the bundled corpus (source None or 'austen') or of a file/folder, for one split (a split
    that selects nothing, or a name that is none of Split's, gives every paragraph)."""
    if source is None or str(source) in ("austen", "bundled"):
        items = _bundled_paragraphs()
    else:
        items = tuple((f"{i}", t) for i, t in enumerate(_read_source(Path(source).expanduser())))
    if split == "all":
        return [text for _, text in items]
    chosen = [text for key, text in items if _split_of(key) == split]
    return chosen or [text for _, text in items]


def token_stream(tokenizer, texts: Iterable[str], max_tokens: int | None = None) -> torch.Tensor:
    """Concatenate tokenised texts (separated by EOS when the tokenizer has one) up to max_tokens ids."""
    eos = getattr(tokenizer, "eos_token_id", None)
    pieces: list[int] = []
    texts = iter(texts)
    size = 8
    while max_tokens is None or len(pieces) < max_tokens:
        batch = [text for _, text in zip(range(size), texts, strict=False)]
        if not batch:
            break
        for ids in tokenizer(batch, add_special_tokens=False).input_ids:  # one batched call (fast tokenizers)
            pieces.extend(ids)
            if eos is not None:
                pieces.append(int(eos))
            if max_tokens is not None and len(pieces) >= max_tokens:
                break
        size = min(2 * size, 512)
    ids = torch.tensor(pieces[:max_tokens] if max_tokens else pieces, dtype=torch.long)
    return ids


def token_chunks(tokenizer, seq_len: int, n_tokens: int, source: str | Path | None = None,
                 split: Split | str = "train") -> torch.Tensor:
    """[n_chunks, seq_len] token windows covering about n_tokens tokens of the corpus, in order."""
    if seq_len < 2:
        raise InterpscopeError("seq_len must be at least 2.")
    ids = token_stream(tokenizer, paragraphs(source, split), max_tokens=n_tokens)
    n_chunks = ids.numel() // seq_len
    if n_chunks == 0:
        raise InterpscopeError(f"The corpus has only {ids.numel()} tokens; need at least {seq_len}.")
    return ids[: n_chunks * seq_len].view(n_chunks, seq_len)


def sample_prompts(n: int, split: Split = "test", min_words: int = 12, max_words: int = 60,
                   source: str | Path | None = None) -> list[str]:
    """n prompts (paragraph openings of min..max words) from the held-out split, deterministic."""
    prompts = []
    for para in paragraphs(source, split):
        words = para.split()
        if len(words) >= min_words:
            prompts.append(" ".join(words[:max_words]))
        if len(prompts) >= n:
            break
    return prompts
