"""Names that load on first use (PEP 562), for the package and its API namespaces (interpscope, .sae, .entropy_neurons,
.fourier): `import interpscope` imports no torch or model code until a name is used."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, table: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package` for `table` (name -> module that defines it, or the
    name's own subpackage `package.name`); a name is imported once and then kept in the package's globals."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if module == f"{package}.{name}":  # a subpackage (an API namespace): the import binds it on the package
            return importlib.import_module(module)
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
