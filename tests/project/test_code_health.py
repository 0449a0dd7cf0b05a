"""Code health the design card asks for, checked on the source: no import circles among the project's modules, and
every hook registration inside interpscope.capture (the one hook mechanism).

Every import counts, at module level, inside a function or under TYPE_CHECKING alike; the layers run one way
(pages -> components -> interpscope), and no two top folders import each other.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# where each layer's modules live, and the import name of the folder's top: the package from its source root
# backend/, the Streamlit app's components/ and pages/ from the repository root
LAYERS = {"interpscope": ROOT / "backend" / "interpscope", "components": ROOT / "components", "pages": ROOT / "pages"}

# Circles not yet untied (issue 23.5): none left, so the test asserts there are none. Should one ever be listed
# again, the list only shrinks: a new circle fails the test, and so does a listed one that is gone.
KNOWN_CIRCLES: set[tuple[str, ...]] = set()


def module_files(layers: dict[str, Path] = LAYERS) -> dict[str, Path]:
    """Import name -> file of every module of the three layers."""
    mods = {}
    for top, folder in layers.items():
        for path in sorted(folder.rglob("*.py")):
            name = ".".join((top, *path.relative_to(folder).with_suffix("").parts))
            mods[name.removesuffix(".__init__")] = path
    return mods


def imported_names(path: Path) -> set[str]:
    """Every absolute import of a file: module level, inside a function or under TYPE_CHECKING alike (with each
    `from X import y` also as X.y, so an imported submodule counts)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def module_graph(layers: dict[str, Path] = LAYERS) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    mods = module_files(layers)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for t in imported_names(path):
            if t in mods and t != m and not m.startswith(t + "."):  # a submodule may use its own package
                edges[m].add(t)
    return edges


def folder_of(module: str) -> str:
    """The top folder a module belongs to: interpscope's first-level package or module (interpscope.sae,
    interpscope.paths), or the app's components / pages."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "interpscope" and len(parts) > 1 else parts[0]


def folder_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for m, targets in edges.items():
        here = folder_of(m)
        folders.setdefault(here, set())
        folders[here] |= {folder_of(t) for t in targets if folder_of(t) != here and folder_of(t) != "interpscope"}
    return folders


def circles(edges: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan), each as a sorted tuple."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.add(tuple(sorted(comp)))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        for v in sorted(edges):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_circle_finder_finds_a_planted_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b", "c")}
    assert circles({"a": {"b"}, "b": set()}) == set()


def test_no_new_import_circles():
    found = circles(module_graph())
    assert not found - KNOWN_CIRCLES, f"new import circles: {sorted(found - KNOWN_CIRCLES)}"
    assert not KNOWN_CIRCLES - found, f"untied, take them off KNOWN_CIRCLES: {sorted(KNOWN_CIRCLES - found)}"


def test_no_import_circles_between_top_folders():
    """interpscope's first-level packages (and its top modules), components and pages import one another in one
    direction only."""
    assert circles(folder_graph(module_graph())) == set()


def test_the_folder_graph_sees_a_planted_folder_circle():
    edges = {"interpscope.a.x": {"interpscope.b.y"}, "interpscope.b.y": set(), "interpscope.b.z": {"interpscope.a"},
             "interpscope.a": set(), "pages.p": {"interpscope.a.x"}}
    assert circles(folder_graph(edges)) == {("interpscope.a", "interpscope.b")}
    assert folder_graph(edges)["pages"] == {"interpscope.a"}


def _layer_offenders(layer: str, forbidden: tuple[str, ...], layers: dict[str, Path] = LAYERS) -> list[str]:
    offenders = []
    for module, path in module_files({layer: layers[layer]}).items():
        for name in sorted(imported_names(path)):
            if name.split(".")[0] in forbidden:
                offenders.append(f"{module}: imports {name}")
    return offenders


def test_the_library_never_imports_the_app():
    """The layers run one way: pages -> components -> interpscope. The library (backend/interpscope) imports neither
    streamlit nor the app's pages or components, so every Result.figure() works in a notebook without the UI."""
    assert _layer_offenders("interpscope", ("streamlit", "pages", "components")) == []


def test_components_never_import_pages():
    assert _layer_offenders("components", ("pages",)) == []


def test_the_layer_check_sees_a_planted_import(tmp_path):
    (tmp_path / "leak.py").write_text("def f():\n    import streamlit as st\n    return st\n")
    found = _layer_offenders("interpscope", ("streamlit",), {"interpscope": tmp_path})
    assert found == ["interpscope.leak: imports streamlit"]


HOOK_CALLS = re.compile(r"\bregister_(forward_pre_hook|forward_hook|full_backward_pre_hook|full_backward_hook|"
                        r"backward_hook|module_forward_pre_hook|module_forward_hook|module_full_backward_hook)\b"
                        r"|\.register_hook\(")


def test_every_hook_registration_is_in_capture():
    """One hook mechanism (interpscope.capture): no other module registers a torch hook itself."""
    outside = []
    for top in ("backend", "components", "pages", "scripts", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "backend" / "interpscope" / "capture.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if HOOK_CALLS.search(line):
                    outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for path in [ROOT / "app.py"]:
        outside += [f"app.py:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if HOOK_CALLS.search(line)]
    assert not outside, "hooks registered outside backend/interpscope/capture.py:\n" + "\n".join(outside)
    capture = ROOT / "backend" / "interpscope" / "capture.py"
    assert HOOK_CALLS.search(capture.read_text(encoding="utf-8")), "the pattern finds none"
