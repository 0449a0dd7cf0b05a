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
# The documentation site (mkdocs.yml, docs/), warnings as errors: its CLI, schema and limits references are generated
# from the code by docs/hooks.py, so a command or result the docs cannot describe fails here. Output: build/site.
# Not --quiet: it hides the warnings that --strict counts, and the build then passes whatever they say.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir build/site
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
