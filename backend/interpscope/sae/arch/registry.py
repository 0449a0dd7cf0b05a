"""The registry of SAE architectures: register once, look up by name or alias."""
from __future__ import annotations

import torch

from interpscope.sae.arch.base import SAEConfig, SparseAutoencoder

_REGISTRY: dict[str, type[SparseAutoencoder]] = {}
_ALIASES: dict[str, str] = {}


def register(cls: type[SparseAutoencoder]) -> type[SparseAutoencoder]:
    """Add an architecture; its name and aliases must be new."""
    names = {cls.architecture, *cls.aliases}
    taken = sorted(name for name in names if name in _ALIASES)
    if not cls.architecture or not cls.short_name or not cls.label or not cls.folder_architecture or taken:
        raise ValueError(f"Cannot register {cls.__name__}: it needs architecture, short_name, label and "
                         f"folder_architecture, and unused names (taken: {taken}).")
    _REGISTRY[cls.architecture] = cls
    _ALIASES.update({name: cls.architecture for name in names})
    return cls


def registered() -> list[type[SparseAutoencoder]]:
    """Every architecture, in registration order."""
    return list(_REGISTRY.values())


def choices_text() -> str:
    """'relu (standard), gated, ... or batchtopk': the names a person can type."""
    names = [cls.short_name if cls.short_name == cls.architecture else f"{cls.short_name} ({cls.architecture})"
             for cls in registered()]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def canonical_architecture(name: str) -> str:
    """The registered name for a name or alias ('relu' -> 'standard'); ValueError for anything unknown."""
    key = (name or "standard").lower()
    if key not in _ALIASES:
        raise ValueError(f"Unknown SAE architecture {name!r}: choose {choices_text()}.")
    return _ALIASES[key]


def architecture_class(name: str) -> type[SparseAutoencoder]:
    """The class registered under a name or alias."""
    return _REGISTRY[canonical_architecture(name)]


def build_sae(cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0) -> SparseAutoencoder:
    """A freshly initialised SAE of cfg.architecture (decoder rows unit norm, encoder = decoder transpose)."""
    cfg.architecture = canonical_architecture(cfg.architecture)
    return _REGISTRY[cfg.architecture](cfg, dtype=dtype, seed=seed)

