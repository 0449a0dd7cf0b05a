"""An explanation's own words: what the lexical scorer and the checks for empty explanations read (here so that
explanation_quality and verification both use them without importing each other)."""
from __future__ import annotations

from interpscope.sae.store.explain import PROMPT_HEAD, PROMPT_TAIL, _words

INSTRUCTION_WORDS = _words(PROMPT_HEAD + " " + PROMPT_TAIL) | {"marked", "mark", "marks", "common"}


def content_words(explanation: str) -> set[str]:
    """The scorer's words of an explanation that are not the writer's instructions (plural -s folded)."""
    return {w for w in _words(explanation) if w not in INSTRUCTION_WORDS and w.rstrip("s") not in INSTRUCTION_WORDS}


def is_degenerate(explanation: str) -> bool:
    return not content_words(explanation or "")
