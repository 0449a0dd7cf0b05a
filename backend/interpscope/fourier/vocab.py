"""The word-level tokenizer of the bundled adder: every number 0..N-1 is one token.

Also used by tests to build tiny GPT-2-config models with single-token numbers.
"""
from __future__ import annotations

import re

from interpscope.fourier.data import TEMPLATES

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>")


def template_words(templates: tuple[str, ...] = TEMPLATES) -> list[str]:
    """Words and punctuation marks of the templates, in first-seen order."""
    words: list[str] = []
    for template in templates:
        text = template.replace("{a}", " ").replace("{b}", " ")
        for piece in re.findall(r"[A-Za-z]+|[^\sA-Za-z\d]", text):
            if piece not in words:
                words.append(piece)
    return words


def number_tokenizer(n_numbers: int, templates: tuple[str, ...] = TEMPLATES, max_length: int = 32):
    """A PreTrainedTokenizerFast: specials, the numbers 0..N-1, then the templates' words; adds <bos> in front."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = list(SPECIAL_TOKENS) + [str(n) for n in range(n_numbers)] + template_words(templates)
    vocab = {token: index for index, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", unk_token="<unk>", pad_token="<pad>",
                                   model_max_length=max_length)
