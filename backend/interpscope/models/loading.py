"""Load a model by name: a bundled model, a local folder, or a Hugging Face id already in the local cache.

One loaded copy per (resolved location, device, dtype) per process, shared by every browser session and command,
in one LRU cache under a memory budget (interpscope.models.cache). Hooks on a shared copy act only on the run that
registered them, and the copy's lock is reached through interpscope.capture.model_lock.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from interpscope.adapters import family_of, get_adapter, modality_of
from interpscope.config import InterpscopeError, artefact_hint, resolve_device, resolve_dtype
from interpscope.models.cache import CACHE, estimate_bytes
from interpscope.models.checks import cached_hub_folder, check_finite_weights, check_weight_files
from interpscope.models.loaded import LoadedModel
from interpscope.models.locations import _IMPORT_LOCK, _auto_classes, _resolve_location, hub_reachable  # noqa: F401
from interpscope.models.memory import check_load
from interpscope.models.registry import ASSET_MODEL_NAMES, BUNDLED
from interpscope.paths import display_path, server_mode
from interpscope.results import Result


def _from_pretrained(location: str, device: torch.device, dtype: torch.dtype, local_only: bool):
    AutoConfig, AutoModelForCausalLM, AutoTokenizer, hf_logging = _auto_classes()

    hf_logging.disable_progress_bar()
    kwargs = {"local_files_only": local_only, "trust_remote_code": False}
    config = AutoConfig.from_pretrained(location, **kwargs)
    if modality_of(config.model_type) == "image":
        raise InterpscopeError(f"{Path(location).name} is an image classifier ({config.model_type}): it takes an image "
                               "(the Relevance maps page's uploader, or explain --image FILE), not text.")
    if family_of(config.model_type) is None:
        get_adapter(type("M", (), {"config": config})())  # raises the unsupported-type message
    weights_folder = Path(location) if Path(location).is_dir() else cached_hub_folder(location)
    if weights_folder is not None:
        check_weight_files(weights_folder)  # pickles refused, damaged safetensors named, before anything is opened
    from safetensors import SafetensorError

    model_class = AutoModelForCausalLM
    if getattr(config, "is_encoder_decoder", False):  # T5 / Flan-T5: its adapter serves the seq2seq relevance
        with _IMPORT_LOCK:
            from transformers import AutoModelForSeq2SeqLM
        model_class = AutoModelForSeq2SeqLM
    try:
        model = model_class.from_pretrained(location, config=config, dtype=dtype, use_safetensors=True, **kwargs)
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


def _identity(location: str, source: str) -> str:
    """What a model name resolves to on disk: the real path of its folder (a hub id in the local cache resolves to
    its snapshot folder), so every spelling of one model shares one cache entry."""
    if source == "huggingface":
        try:
            from huggingface_hub import try_to_load_from_cache

            config = try_to_load_from_cache(location, "config.json")
        except Exception:  # noqa: BLE001 - an odd id simply has no cached snapshot
            config = None
        return os.path.realpath(Path(config).parent) if isinstance(config, str) else f"hub:{location}"
    return os.path.realpath(location)


def _canonical_name(name: str, identity: str, source: str) -> str:
    """The name a loaded model is known by, and shown by in every page, title, caption and export: the bundled name
    for a bundled folder, else the resolved folder; in server mode that folder as display_path writes it
    ('[data dir]/models/x', 'assets/...'), never the server's absolute path. load_model reads that form back
    (interpscope.paths.from_display), so the name still loads the same folder (an SAE's cfg.json, a store)."""
    if source == "local":
        for bundled in BUNDLED.values():
            if os.path.realpath(bundled.known_location()) == identity:
                return bundled.name
        return display_path(identity) if server_mode() else identity
    return name


def load_model(name: str, device: str = "auto", dtype: str | torch.dtype = "float32") -> LoadedModel:
    """Load (or fetch from the process's one model cache) a model by bundled name, folder or Hugging Face id.

    The cache holds one copy per (resolved location, device, dtype) under a memory budget (interpscope.models.cache).
    """
    name = (name or "").strip()
    if not name:
        raise InterpscopeError("No model name given.")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, source, local_only = _resolve_location(name)
    identity = _identity(location, source)
    key = (identity, str(torch_device), str(torch_dtype))

    def load() -> LoadedModel:
        start = time.perf_counter()
        check_load(location, torch_dtype, torch_device, name)  # weights that cannot fit are refused unopened
        try:
            model, tokenizer = _from_pretrained(location, torch_device, torch_dtype, local_only)
        except InterpscopeError:
            raise
        except (OSError, ValueError) as err:
            bundled = ", ".join(BUNDLED)
            if source == "huggingface" and name in ASSET_MODEL_NAMES:
                raise InterpscopeError(f"Model {name!r} is one of Interpscope's own trained models, shipped in "
                                       f"assets/models/: {artefact_hint()}.") from err
            if source == "huggingface":
                raise InterpscopeError(
                    f"Model {name!r} is not available offline: it is not bundled ({bundled}), not a local folder, "
                    f"and not in the Hugging Face cache. Download it where there is network "
                    f"(huggingface-cli download {name}) or pass a local folder.") from err
            raise InterpscopeError(f"Could not load {name!r} from {location}: {err}") from err
        for param in model.parameters():  # inference only: autograd records nothing for weights
            param.requires_grad_(False)
        return LoadedModel(name=_canonical_name(name, identity, source), model=model, tokenizer=tokenizer,
                           adapter=get_adapter(model), device=torch_device, dtype=torch_dtype, source=source,
                           load_seconds=time.perf_counter() - start)

    return CACHE.get_or_load(key, load, estimate_bytes(location, torch_dtype))


def using(lm: LoadedModel):
    """Context manager: keep `lm` in the cache (never evicted) while the block runs."""
    return CACHE.using(lm)


def cached_models() -> list[dict]:
    """The cached copies, least recently used first: key (resolved location, device, dtype), bytes, in use."""
    return CACHE.entries()


def clear_cache() -> None:
    CACHE.clear()


def _hf_cache_models() -> list[dict]:
    """Causal LMs of a supported family already in the local Hugging Face hub cache."""
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE") or hf_home / "hub")
    found: list[dict] = []
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
                              "source": "huggingface-cache", "modality": modality_of(model_type)})
            break
    return found


def available_models() -> list[dict]:
    """Bundled models first, then supported models in the local Hugging Face cache."""
    models = [{"name": m.name, "family": m.family, "source": "bundled", "description": m.description,
               "modality": m.modality} for m in BUNDLED.values()]
    return models + _hf_cache_models()


@dataclass
class ModelEntry:
    """One model `load` can open without a network: its name, family, where it comes from (bundled or the local
    Hugging Face cache), what it reads ("text" or "image") and, for bundled ones, what it is."""

    name: str
    family: str
    source: str
    description: str | None = None
    modality: str = "text"


@dataclass
class ModelList(Result):
    """The models `load` can open here (schema interpscope.models): bundled first, then the local Hugging Face
    cache's models of a supported family; `interpscope models --json` prints this document."""

    SCHEMA = "interpscope.models"
    SCHEMA_VERSION = 1

    models: list[ModelEntry]

    def tidy(self) -> list[dict]:
        """One row per model."""
        return [{"name": m.name, "family": m.family, "source": m.source, "description": m.description,
                 "modality": m.modality}
                for m in self.models]

    def figure(self):
        """The list as a plotly table (name, family, what it reads, where it comes from, what it is): a list of
        models has no chart to draw, and this keeps `.figure()` and the inline view the same for every result."""
        import plotly.graph_objects as go

        rows = self.tidy()
        columns = ("name", "family", "modality", "source", "description")
        fig = go.Figure(go.Table(
            header={"values": [f"<b>{c}</b>" for c in columns], "align": "left", "fill_color": "#eeeeee"},
            cells={"values": [[str(r[c] or "") for r in rows] for c in columns], "align": "left"},
            columnwidth=[2, 1, 1, 1, 4]))
        fig.update_layout(title=f"{len(rows)} model(s) `load` can open here", height=120 + 28 * max(len(rows), 1),
                          margin={"l": 10, "r": 10, "t": 40, "b": 10})
        return fig


def model_list() -> ModelList:
    """available_models() as a typed result (the CLI's `models --json`, the API's interpscope.list_models())."""
    return ModelList([ModelEntry(m["name"], m["family"], m["source"], m.get("description"),
                                 m.get("modality") or "text") for m in available_models()])
