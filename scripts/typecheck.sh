#!/usr/bin/env bash
# mypy on the real package: `interpscope` as a folder of links (one per entry of backend/, and components ->
# components/) under build/typecheck/, so mypy follows every call between the project's modules with its types.
# (It cannot follow the editable install, whose package-dir mapping lives in an import hook, and checked as
# backend/ and components/ every `interpscope.*` import would be a missing module.)
# The project's type check: scripts/run-tests.sh runs it; by hand: bash scripts/typecheck.sh [extra mypy options].
# Works on a fresh clone (creates build/typecheck/); rebuilds only what it made: the link tree and the derived
# config under build/typecheck/.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck
pkg=$tree/interpscope
if [ -d "$pkg" ]; then  # last run's tree: only links, in a folder this script made
    find "$pkg" -mindepth 1 -maxdepth 1 -type l -delete
    rmdir "$pkg"
fi
rm -f "$tree/mypy.ini"
mkdir -p "$pkg"
for entry in backend/*; do
    name=$(basename "$entry")
    case "$name" in __pycache__|components) continue ;; esac
    ln -s "../../../backend/$name" "$pkg/$name"
done
ln -s ../../../components "$pkg/components"
# pyproject's [tool.mypy], pointed at the tree, with interpscope itself no longer a missing import
.venv/bin/python - "$tree/mypy.ini" <<'PY'
import sys
import tomllib

config = tomllib.load(open("pyproject.toml", "rb"))["tool"]["mypy"]
lines = ["[mypy]", "files = build/typecheck/interpscope", "mypy_path = build/typecheck"]
lines += [f"{key} = {value}" for key, value in config.items() if key not in ("files", "mypy_path", "overrides")]
for override in config.get("overrides", []):
    modules = [m for m in override["module"] if m not in ("interpscope", "interpscope.*")]
    lines.append(f"[mypy-{','.join(modules)}]")
    lines += [f"{key} = {value}" for key, value in override.items() if key != "module"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
exec .venv/bin/mypy --config-file "$tree/mypy.ini" "$@"
