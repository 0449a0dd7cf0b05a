#!/usr/bin/env bash
# Set everything up (idempotent) and run the whole test suite, browser tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Code health first (pinned in the test extra): lint and import order over the repo, types over the interpscope
# package (backend/interpscope/ and components/, with every call between its modules checked: scripts/typecheck.sh and
# [tool.mypy] in pyproject.toml); either one's finding fails the run before any test starts.
.venv/bin/ruff check .
bash scripts/typecheck.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
