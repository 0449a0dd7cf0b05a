"""Interpscope: look inside language models from Python, the command line or the browser.

    import interpscope
    lm = interpscope.load("smollm2-135m", device="auto", dtype="float32")
    interpscope.predict(lm, "The capital of France is", top=10)       # Prediction
    interpscope.explain(lm, "The capital of France is", method="attnlrp", target=" Paris")  # RelevanceResult
    interpscope.flow(lm, "When Mary and John went to the store, John gave a drink to")     # InformationFlow

Every function returns a typed result: `.to_dict()` is the JSON document (with its `schema` name and
`schema_version`) that the CLI's --json and the page's JSON export also write, `.to_frame()` / `.to_csv()` the tidy
table, `.figure()` the Plotly figure the page shows; results render inline in Jupyter. `interpscope.methods()` lists
the registered relevance methods, `interpscope.list_models()` the models `load` can open offline.

Importing the package is cheap: the API's names are attributes resolved on first use (PEP 562), so torch and
transformers load only when a model is loaded or a function runs. It lives in backend/interpscope/ and never imports
streamlit, the app's pages or its components.
"""
from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from interpscope.lazy import lazy_names

if TYPE_CHECKING:
    from interpscope.api import (
        compare_faithfulness,
        explain,
        explain_file,
        explain_image,
        explain_seq2seq,
        faithfulness,
        flow,
        heldout,
        ig_convergence,
        list_models,
        load,
        load_image,
        methods,
        patch,
        patch_flipping,
        patch_set,
        path_patch,
        predict,
    )
    from interpscope.models.loading import LoadedModel
    from interpscope.results import Result, document, without_timings

# public name -> the module that defines it (imported on first access)
_LAZY = {
    "load": "interpscope.api",
    "list_models": "interpscope.api",
    "methods": "interpscope.api",
    "predict": "interpscope.api",
    "explain": "interpscope.api",
    "faithfulness": "interpscope.api",
    "compare_faithfulness": "interpscope.api",
    "ig_convergence": "interpscope.api",
    "heldout": "interpscope.api",
    "explain_file": "interpscope.api",
    "explain_seq2seq": "interpscope.api",
    "explain_experts": "interpscope.api",
    "load_image": "interpscope.api",
    "explain_image": "interpscope.api",
    "patch_flipping": "interpscope.api",
    "flow": "interpscope.api",
    "patch": "interpscope.api",
    "path_patch": "interpscope.api",
    "patch_set": "interpscope.api",
    "head_patterns": "interpscope.api",
    "find_heads": "interpscope.api",
    "tuned_lens": "interpscope.api",
    "LoadedModel": "interpscope.models.loading",
    "Result": "interpscope.results",
    "document": "interpscope.results",
    "without_timings": "interpscope.results",
}

__all__ = [
    "LoadedModel", "Result", "compare_faithfulness", "document", "explain", "explain_file", "explain_seq2seq",
    "faithfulness", "flow", "heldout", "ig_convergence", "list_models", "load", "methods", "patch", "path_patch",
    "patch_set", "predict", "without_timings", "load_image", "explain_image", "patch_flipping",
    "explain_experts", "head_patterns", "find_heads", "tuned_lens",
    "entropy_neurons", "fourier", "graphs", "sae",  # the namespaces (subpackages, imported on first access)
]
# API functions named like a submodule of the package (interpscope.predict, interpscope.flow): the package
# attribute is the function; the module stays importable with `from interpscope.predict import ...`.
_API_OVER_MODULE = {"predict", "flow"}


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API_OVER_MODULE and isinstance(value, types.ModuleType):
            return  # importing the submodule must not replace the API function on the package
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


# The API's namespaces are subpackages: `interpscope.sae.load(...)` works after a bare `import interpscope`.
_NAMESPACES = ("sae", "entropy_neurons", "fourier", "graphs")
# names the namespaces had before the views took one name each (the entropy-neurons view was `neurons`)
_OLD_NAMESPACES = {"neurons": "entropy_neurons"}


_lazy_getattr, _ = lazy_names(__name__, {**_LAZY, **{name: f"{__name__}.{name}" for name in _NAMESPACES}})


def __getattr__(name: str) -> Any:
    if name in _OLD_NAMESPACES:
        return _lazy_getattr(_OLD_NAMESPACES[name])
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    """The public API (what `__all__` lists), not the module's own machinery."""
    return sorted(__all__)
