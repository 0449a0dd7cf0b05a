"""Code health the design card asks for, checked on the source: no import circles among the project's modules, and
every hook registration inside interpscope.capture (the one hook mechanism).

The circle check is the project's own tool (/work/shared/tools/import_cycles.py), copied here so the suite needs no
folder outside the repository: every import counts, at module level, inside a function or under TYPE_CHECKING alike.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("backend", "components", "pages")

# Circles not yet untied (issue 23.5): none left, so the test asserts there are none. Should one ever be listed
# again, the list only shrinks: a new circle fails the test, and so does a listed one that is gone.
KNOWN_CIRCLES: set[tuple[str, ...]] = set()


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports (interpscope.* mapped onto the folders, as the package maps them)."""
    mods = {}
    for top in FOLDERS:
        for path in sorted((root / top).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            mods[name] = path
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t.startswith("interpscope.components"):
                    t = "components" + t[len("interpscope.components"):]
                elif t.startswith("interpscope.pages"):
                    t = "pages" + t[len("interpscope.pages"):]
                elif t.startswith("interpscope"):
                    t = "backend" + t[len("interpscope"):]
                if t in mods and t != m and not m.startswith(t + "."):  # a submodule may use its own package
                    edges[m].add(t)
    return edges


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
    found = circles(module_graph(ROOT))
    assert not found - KNOWN_CIRCLES, f"new import circles: {sorted(found - KNOWN_CIRCLES)}"
    assert not KNOWN_CIRCLES - found, f"untied, take them off KNOWN_CIRCLES: {sorted(KNOWN_CIRCLES - found)}"


HOOK_CALLS = re.compile(r"\bregister_(forward_pre_hook|forward_hook|full_backward_pre_hook|full_backward_hook|"
                        r"backward_hook|module_forward_pre_hook|module_forward_hook|module_full_backward_hook)\b"
                        r"|\.register_hook\(")


def test_every_hook_registration_is_in_capture():
    """One hook mechanism (interpscope.capture): no other module registers a torch hook itself."""
    outside = []
    for top in (*FOLDERS, "scripts", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "backend" / "capture.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if HOOK_CALLS.search(line):
                    outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for path in [ROOT / "app.py"]:
        outside += [f"app.py:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if HOOK_CALLS.search(line)]
    assert not outside, "hooks registered outside backend/capture.py:\n" + "\n".join(outside)
    assert HOOK_CALLS.search((ROOT / "backend" / "capture.py").read_text(encoding="utf-8")), "the pattern finds none"
