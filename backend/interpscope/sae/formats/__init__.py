"""Released dictionaries in their publishers' own layouts, read into Interpscope's SAE classes.

Interpscope's own folder format is SAELens's (cfg.json + sae_weights.safetensors, interpscope.sae.folder). Released
SAEs and transcoders come in other layouts: Gemma Scope 2 (`params.safetensors`, optional `config.json`), Gemma
Scope 1 (`params.npz`), Llama Scope / lm-saes (`hyperparams.json` + `checkpoints/final.safetensors`), circuit-tracer
transcoder sets (a config yaml naming one file per layer). Each layout is one module here with one registration: a
`ReleasedFormat` says whether a folder is its own (`detect`) and turns the folder into the content of a cfg.json
and tensors in SAELens's names (`read`), with the release's hook names mapped onto the adapters' hook points. The
SAE is then built with every check of load_sae (interpscope.sae.folder.sae_from_parts), so a released dictionary
is an SAE like any other: load_sae opens such a folder directly, and `convert` writes it once as an SAE folder so
stores, the browser, steering and circuits use it unchanged (interpscope.sae.releases does that for releases named
`RELEASE/SAE_ID`).

Where a folder came from is read from its place in a Hugging Face cache (`models--ORG--NAME/snapshots/REV/PATH`)
when it lies in one (`Source`): the repository names the model and the path names the hook.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from interpscope.config import InterpscopeError

_CACHE_PATH = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")


@dataclass(frozen=True)
class Source:
    """Where a released folder came from: its Hugging Face repository, revision and path inside it ("" unknown)."""

    repo_id: str = ""
    path: str = ""
    revision: str = ""

    @classmethod
    def of(cls, folder: Path) -> Source:
        """Read from the folder's place in a Hugging Face cache; an empty Source elsewhere (the folder's own name
        is then the path)."""
        text = Path(folder).as_posix().rstrip("/")
        match = _CACHE_PATH.search(text)
        if not match:
            return cls("", Path(folder).name, "")
        return cls(f"{match['org']}/{match['name']}", match["path"] or "", match["rev"])


class ReleasedFormat:
    """One publisher's layout: detect a folder in it, read it as cfg.json content + SAELens-named tensors."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    weights_file: ClassVar[str] = ""

    def detect(self, folder: Path) -> bool:
        raise NotImplementedError

    def read(self, folder: Path, source: Source) -> tuple[dict, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def load(self, folder: str | Path, dtype: str | torch.dtype | None = "float32", source: Source | None = None):
        """The SAE (or transcoder) this folder holds, checked as load_sae checks a folder."""
        from interpscope.sae.parts import sae_from_parts

        folder = Path(folder)
        raw, tensors = self.read(folder, source or Source.of(folder))
        return sae_from_parts(raw, tensors, folder, dtype, weights_file=self.weights_file)


_FORMATS: list[ReleasedFormat] = []


def register_format(fmt: ReleasedFormat) -> ReleasedFormat:
    if not fmt.name or any(other.name == fmt.name for other in _FORMATS):
        raise ValueError(f"Cannot register released format {fmt.name!r}: it needs a new name.")
    _FORMATS.append(fmt)
    return fmt


def released_formats() -> list[ReleasedFormat]:
    return list(_FORMATS)


def format_named(name: str) -> ReleasedFormat:
    for fmt in _FORMATS:
        if fmt.name == name:
            return fmt
    raise InterpscopeError(f"Unknown released format {name!r}; Interpscope reads "
                           f"{', '.join(f.name for f in _FORMATS)}.")


def detect_format(folder: Path) -> ReleasedFormat | None:
    """The released format a folder is in, or None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    return next((fmt for fmt in _FORMATS if fmt.detect(folder)), None)


def _register_all() -> None:
    from interpscope.sae.formats.gemma_scope import GemmaScope1, GemmaScope2
    from interpscope.sae.formats.lm_saes import LlamaScope

    for fmt in (GemmaScope2(), GemmaScope1(), LlamaScope()):
        register_format(fmt)


_register_all()

__all__ = ["ReleasedFormat", "Source", "detect_format", "format_named", "register_format", "released_formats"]
