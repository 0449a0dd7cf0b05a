#!/usr/bin/env bash
# Set everything up (idempotent) and open the app on the bundled default model at http://localhost:8501.
# Listens on 127.0.0.1 only; INTERPSCOPE_ADDRESS or --server.address serves elsewhere, --shared turns on server
# mode (see "Serving to others safely" in README.md). Any streamlit option given here wins over the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/serve_app.py --server.port "${PORT:-8501}" --server.headless true \
  --browser.gatherUsageStats false "$@"
