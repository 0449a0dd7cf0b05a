#!/usr/bin/env bash
# The project's type check: mypy over backend/interpscope (the package, from its source root) and components/, with
# pyproject's [tool.mypy]. scripts/run-tests.sh runs it; by hand: bash scripts/typecheck.sh [extra mypy options].
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/mypy "$@"
