"""Load a model by name: a bundled model, a local folder, or a Hugging Face id already in the local cache.

One loaded copy per (model, device, dtype) per process, shared by every browser session and command.
Each LoadedModel carries a lock: work that changes module behaviour (relevance rules, hooks that edit
activations) holds it so concurrent users of the same copy never see each other's patches.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from backend.adapters import ModelAdapter, family_of, get_adapter
from backend.config import InterpscopeError, resolve_device, resolve_dtype
from backend.inputs import DEFAULT_TOKEN_CAP, check_text, check_token_count
from backend.models.checks import cached_hub_folder, check_finite_weights, check_model_name, check_weight_files
from backend.models.registry import BUNDLED


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer, adapter, and the facts a model card shows."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    adapter: ModelAdapter
    device: torch.device
    dtype: torch.dtype
    source: str
    load_seconds: float

    @property
    def family(self) -> str:
        return self.adapter.family

    @property
    def context_length(self) -> int | None:
        for attr in ("max_position_embeddings", "n_positions", "n_ctx"):
            value = getattr(self.model.config, attr, None)
            if value:
                return int(value)
        return None

    @property
    def token_cap(self) -> int:
        context = self.context_length
        return min(DEFAULT_TOKEN_CAP, context) if context else DEFAULT_TOKEN_CAP

    def encode(self, text: str, max_tokens: int | None = None) -> torch.Tensor:
        """Token ids [1, T] on the model's device, after checking the text and its length."""
        check_text(text)
        ids = self.tokenizer(text, return_tensors="pt").input_ids
        check_token_count(ids.shape[1], max_tokens or self.token_cap)
        return ids.to(self.device)

    def token_strings(self, ids) -> list[str]:
        """Readable text of each token id (byte-level BPE markers decoded)."""
        flat = ids.reshape(-1).tolist() if hasattr(ids, "reshape") else list(ids)
        return [self.tokenizer.decode([int(i)]) for i in flat]

    def n_parameters(self) -> int:
        seen: set[int] = set()
        total = 0
        for param in self.model.parameters():
            if param.data_ptr() not in seen:
                seen.add(param.data_ptr())
                total += param.numel()
        return total

    def card(self) -> dict:
        info = {"name": self.name, "source": self.source, "parameters": self.n_parameters()}
        info.update(self.adapter.describe())
        info.update({"context": self.context_length, "device": str(self.device),
                     "dtype": str(self.dtype).replace("torch.", ""), "load_seconds": round(self.load_seconds, 2)})
        return info


_CACHE: dict[tuple[str, str, str], LoadedModel] = {}
_CACHE_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether huggingface.co answers quickly; False when HF_HUB_OFFLINE is set."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=1.5):
            return True
    except OSError:
        return False


def _from_pretrained(location: str, device: torch.device, dtype: torch.dtype, local_only: bool):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    kwargs = {"local_files_only": local_only, "trust_remote_code": False}
    config = AutoConfig.from_pretrained(location, **kwargs)
    if family_of(config.model_type) is None:
        get_adapter(type("M", (), {"config": config})())  # raises the unsupported-type message
    weights_folder = Path(location) if Path(location).is_dir() else cached_hub_folder(location)
    if weights_folder is not None:
        check_weight_files(weights_folder)  # pickles refused, damaged safetensors named, before anything is opened
    from safetensors import SafetensorError

    try:
        model = AutoModelForCausalLM.from_pretrained(location, config=config, dtype=dtype, use_safetensors=True,
                                                     **kwargs)
    except SafetensorError as err:
        raise InterpscopeError(f"The weights of {location} are not readable safetensors ({err}).") from None
    check_finite_weights(model)
    try:
        model.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001 - families without attention (Mamba) have nothing to switch
        pass
    tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device).eval()
    return model, tokenizer


def _resolve_location(name: str) -> tuple[str, str, bool]:
    """(location for from_pretrained, source label, local_files_only)."""
    check_model_name(name)
    if name in BUNDLED:
        return str(BUNDLED[name].folder()), "bundled", True
    path = Path(name).expanduser()
    try:
        exists = path.exists()
    except OSError as err:
        raise InterpscopeError(f"No model folder at {name[:80]!r}: {err.strerror or err}.") from None
    if exists:
        if not (path / "config.json").is_file():
            raise InterpscopeError(f"{path} is not a Hugging Face model folder (no config.json in it).")
        return str(path.resolve()), "local", True
    if name.count("/") > 1 or name.startswith((".", "/", "~")) or not name.strip():
        raise InterpscopeError(f"No model folder at {name!r}.")
    return name, "huggingface", not hub_reachable()


def load_model(name: str, device: str = "auto", dtype: str | torch.dtype = "float32") -> LoadedModel:
    """Load (or fetch from the per-process cache) a model by bundled name, folder or Hugging Face id."""
    name = (name or "").strip()
    if not name:
        raise InterpscopeError("No model name given.")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    key = (name, str(torch_device), str(torch_dtype))
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        start = time.perf_counter()
        location, source, local_only = _resolve_location(name)
        try:
            model, tokenizer = _from_pretrained(location, torch_device, torch_dtype, local_only)
        except InterpscopeError:
            raise
        except (OSError, ValueError) as err:
            bundled = ", ".join(BUNDLED)
            if source == "huggingface":
                raise InterpscopeError(
                    f"Model {name!r} is not available offline: it is not bundled ({bundled}), not a local folder, "
                    f"and not in the Hugging Face cache. Download it where there is network "
                    f"(huggingface-cli download {name}) or pass a local folder.") from err
            raise InterpscopeError(f"Could not load {name!r} from {location}: {err}") from err
        loaded = LoadedModel(name=name, model=model, tokenizer=tokenizer, adapter=get_adapter(model),
                             device=torch_device, dtype=torch_dtype, source=source,
                             load_seconds=time.perf_counter() - start)
        _CACHE[key] = loaded
        return loaded


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


def _hf_cache_models() -> list[dict]:
    """Causal LMs of a supported family already in the local Hugging Face hub cache."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    found = []
    if not hub.is_dir():
        return found
    for repo in sorted(hub.glob("models--*")):
        for config_path in repo.glob("snapshots/*/config.json"):
            try:
                model_type = json.loads(config_path.read_text()).get("model_type", "")
            except (OSError, json.JSONDecodeError):
                continue
            family = family_of(model_type)
            if family:
                found.append({"name": repo.name[len("models--"):].replace("--", "/"), "family": family,
                              "source": "huggingface-cache"})
            break
    return found


def available_models() -> list[dict]:
    """Bundled models first, then supported models in the local Hugging Face cache."""
    models = [{"name": m.name, "family": m.family, "source": "bundled", "description": m.description}
              for m in BUNDLED.values()]
    return models + _hf_cache_models()
