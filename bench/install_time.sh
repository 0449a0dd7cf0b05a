#!/usr/bin/env bash
# Time the setup command on a fresh clone (new .venv; pip's wheel cache and Debian packages as this machine has
# them), then a second, idempotent run. Prints JSON.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dest=$(mktemp -d /tmp/interpscope-install-XXXX)
git clone -q "$src" "$dest/repo"
cd "$dest/repo"
t0=$(date +%s.%N); bash scripts/setup.sh >/dev/null 2>&1; t1=$(date +%s.%N)
bash scripts/setup.sh >/dev/null 2>&1; t2=$(date +%s.%N)
venv_mb=$(du -sm .venv | cut -f1)
python3 - "$t0" "$t1" "$t2" "$venv_mb" <<'PY'
import json, sys
t0, t1, t2, mb = map(float, sys.argv[1:])
print(json.dumps({"benchmark": "install_time", "fresh_clone_setup_s": round(t1 - t0, 1),
                  "second_run_s": round(t2 - t1, 1), "venv_mb": int(mb),
                  "note": "pip's local wheel cache and the Debian packages already present count in the first figure"}))
PY
rm -rf "$dest"
