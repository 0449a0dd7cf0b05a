"""Results are data: small dataclasses of numpy arrays + metadata, with one JSON/CSV conversion for export."""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np


def to_plain(value: Any) -> Any:
    """Convert dataclasses, numpy and torch values into JSON-ready Python values (NaN/inf -> None).

    The one JSON path of the project: page exports and the command line's --json both go through it. A dataclass
    may list derived properties to include in `__plain_extras__` (e.g. a target's label)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        plain = {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                 if not f.name.startswith("_")}
        for name in getattr(type(value), "__plain_extras__", ()):  # derived facts a reader needs (labels)
            plain[name] = to_plain(getattr(value, name))
        return plain
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return to_plain(value.tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def to_json(value: Any, indent: int | None = 2) -> str:
    return json.dumps(to_plain(value), indent=indent, ensure_ascii=False)
