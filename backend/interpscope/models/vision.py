"""Image classifiers (ViT, DeiT): what a model reads, loading one, and turning an image into its input.

A model's modality ("text" or "image") is read from its config.json without loading weights, so a page can choose
its view and the command line can refuse an image given to a text model (and the reverse) before any work. Image
models load through the same name resolution and the same one model cache as text models (interpscope.models.
loading), with AutoModelForImageClassification; the preprocessing (size, rescale, mean/std) is read from the folder's
preprocessor_config.json, as transformers' ViTImageProcessor would apply it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from interpscope.adapters import get_adapter, modality_of
from interpscope.adapters.vit import ViTAdapter
from interpscope.config import InterpscopeError, resolve_device, resolve_dtype
from interpscope.models.cache import CACHE, estimate_bytes
from interpscope.models.checks import cached_hub_folder, check_finite_weights, check_weight_files

IMAGENET_DEFAULT = (0.5, 0.5)  # ViTImageProcessor's defaults when a folder has no preprocessor_config.json


def _config_path(name: str) -> Path | None:
    """config.json of a model name (bundled, folder or cached hub id), or None when it cannot be found offline."""
    from interpscope.models.loading import _resolve_location

    location, source, _ = _resolve_location(name)
    folder = Path(location) if source != "huggingface" else cached_hub_folder(location)
    if folder is None or not (folder / "config.json").is_file():
        return None
    return folder / "config.json"


def model_modality(name: str) -> str:
    """'image' or 'text' for a model name, from its config.json (no weights loaded); 'text' when unknown (the text
    loader then says what is wrong with the name)."""
    try:
        path = _config_path(name)
        model_type = json.loads(path.read_text()).get("model_type", "") if path is not None else ""
    except (InterpscopeError, OSError, ValueError, AttributeError):
        return "text"
    return modality_of(str(model_type)) or "text"


@dataclass
class Preprocessing:
    """How an image becomes the model's input: resized to height x width, pixels/255, then (x - mean) / std."""

    height: int
    width: int
    channels: int
    mean: list[float]
    std: list[float]

    def to_input(self, value: torch.Tensor) -> torch.Tensor:
        """Pixels in [0, 1] [C, H, W] -> the model's input scale."""
        mean = torch.tensor(self.mean, dtype=value.dtype)[:, None, None]
        std = torch.tensor(self.std, dtype=value.dtype)[:, None, None]
        return (value - mean) / std

    def to_unit(self, value: torch.Tensor) -> torch.Tensor:
        """The model's input scale -> pixels in [0, 1] (the inverse of to_input)."""
        mean = torch.tensor(self.mean, dtype=value.dtype, device=value.device)[:, None, None]
        std = torch.tensor(self.std, dtype=value.dtype, device=value.device)[:, None, None]
        return value * std + mean


def _preprocessing(folder: Path | None, adapter: ViTAdapter) -> Preprocessing:
    height, width = adapter.image_size
    channels = adapter.n_channels
    mean, std = [IMAGENET_DEFAULT[0]] * channels, [IMAGENET_DEFAULT[1]] * channels
    path = None if folder is None else folder / "preprocessor_config.json"
    if path is not None and path.is_file():
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise InterpscopeError(f"{path} is not readable JSON ({err}).") from None
        if spec.get("do_normalize", True):
            mean = [float(v) for v in np.broadcast_to(spec.get("image_mean", mean), (channels,))]
            std = [float(v) for v in np.broadcast_to(spec.get("image_std", std), (channels,))]
        else:
            mean, std = [0.0] * channels, [1.0] * channels
    return Preprocessing(height, width, channels, mean, std)


@dataclass
class LoadedImageModel:
    """A loaded ViT/DeiT image classifier with its adapter, class names and preprocessing."""

    name: str
    model: torch.nn.Module
    adapter: ViTAdapter
    device: torch.device
    dtype: torch.dtype
    source: str
    load_seconds: float
    labels: list[str]
    preprocessing: Preprocessing
    folder: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the bundled folder's interpscope.json (manifest)

    @property
    def family(self) -> str:
        return self.adapter.family

    modality = "image"

    def label(self, index: int) -> str:
        return self.labels[index] if 0 <= index < len(self.labels) else f"class {index}"

    def card(self) -> dict:
        info: dict[str, Any] = {"name": self.name, "source": self.source,
                                "parameters": sum(p.numel() for p in self.model.parameters())}
        info.update(self.adapter.describe())
        info.update({"device": str(self.device), "dtype": str(self.dtype).replace("torch.", ""),
                     "load_seconds": round(self.load_seconds, 2)})
        return info


def _labels(config: Any) -> list[str]:
    id2label = getattr(config, "id2label", None) or {}
    count = int(getattr(config, "num_labels", len(id2label)) or len(id2label))
    return [str(id2label.get(i, id2label.get(str(i), f"class {i}"))) for i in range(count)]


def load_image_model(name: str, device: str = "auto", dtype: str | torch.dtype = "float32") -> LoadedImageModel:
    """Load (or fetch from the one model cache) a ViT/DeiT image classifier by bundled name, folder or cached
    Hugging Face id. A text model is refused with a message saying so."""
    from interpscope.models.loading import _canonical_name, _identity, _resolve_location

    name = (name or "").strip()
    if not name:
        raise InterpscopeError("No model name given.")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, source, local_only = _resolve_location(name)
    identity = _identity(location, source)
    folder = Path(location) if source != "huggingface" else cached_hub_folder(location)

    def load() -> LoadedImageModel:
        from transformers import AutoConfig, AutoModelForImageClassification
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        start = time.perf_counter()
        try:
            config = AutoConfig.from_pretrained(location, local_files_only=local_only, trust_remote_code=False)
        except (OSError, ValueError) as err:
            raise InterpscopeError(f"Could not read the configuration of {name!r}: {err}") from None
        modality = modality_of(config.model_type)
        if modality != "image":
            kind = f"a text model ({config.model_type})" if modality else f"of unsupported type {config.model_type!r}"
            raise InterpscopeError(f"{name} is {kind}: an image needs an image classifier (ViT or DeiT). Give it "
                                   "text instead, or choose an image model.")
        if folder is not None:
            check_weight_files(folder)
        try:
            model, info = AutoModelForImageClassification.from_pretrained(
                location, config=config, dtype=torch_dtype, use_safetensors=True, output_loading_info=True,
                local_files_only=local_only, trust_remote_code=False)
        except (OSError, ValueError) as err:
            raise InterpscopeError(f"Could not load {name!r} from {location}: {err}") from None
        if info.get("missing_keys"):
            raise InterpscopeError(f"{name}: the weights lack {len(info['missing_keys'])} tensors of the classifier "
                                   f"({', '.join(sorted(info['missing_keys'])[:3])}); it would classify at random.")
        check_finite_weights(model)
        model.set_attn_implementation("eager")
        for param in model.parameters():
            param.requires_grad_(False)
        model.to(torch_device).eval()
        adapter = get_adapter(model)
        if not isinstance(adapter, ViTAdapter):
            raise InterpscopeError(f"{name} is not a ViT/DeiT image classifier.")
        meta_path = None if folder is None else folder / "interpscope.json"
        meta = json.loads(meta_path.read_text()) if meta_path is not None and meta_path.is_file() else {}
        return LoadedImageModel(name=_canonical_name(name, identity, source), model=model, adapter=adapter,
                                device=torch_device, dtype=torch_dtype, source=source,
                                load_seconds=time.perf_counter() - start, labels=_labels(config),
                                preprocessing=_preprocessing(folder, adapter),
                                folder=None if folder is None else str(folder), meta=meta)

    key = (f"image:{identity}", str(torch_device), str(torch_dtype))
    # the cache is typed for text models; it only reads `.model` (bytes, lock) and `.name`, which both kinds have
    loaded = CACHE.get_or_load(key, cast(Any, load), estimate_bytes(location, torch_dtype))
    return cast(LoadedImageModel, loaded)


@dataclass
class Example:
    """One shipped held-out image of a bundled image model: file name, true class and where it is."""

    name: str
    label: int
    label_name: str
    path: Path


def bundled_examples(lm: LoadedImageModel) -> list[Example]:
    """The held-out example images shipped in the model's folder (examples/labels.json), or [] when none are."""
    if lm.folder is None:
        return []
    index_path = Path(lm.folder) / "examples" / "labels.json"
    try:
        index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    except (OSError, ValueError):
        return []
    return [Example(name, int(entry["label"]), lm.label(int(entry["label"])), index_path.parent / name)
            for name, entry in index.items() if (index_path.parent / name).is_file()]
