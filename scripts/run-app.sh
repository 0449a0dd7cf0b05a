#!/usr/bin/env bash
# Set everything up (idempotent) and open the app on the bundled default model at http://localhost:8501.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/serve_app.py --server.port "${PORT:-8501}" --server.headless true \
  --browser.gatherUsageStats false "$@"
