#!/usr/bin/env bash
# Build the feature stores of the shipped SAEs (assets/saes/*) into assets/sae_stores/<same name>/, over the first
# 299,904 tokens (2,343 windows of 128) of the bundled corpus's train split: the windows the SAE trainer cached.
# Reuses the SAE trainer's activation cache when one covers those windows (seconds), else runs SmolLM2 up to the
# hook (minutes on a CPU). Idempotent: a store that is already complete for the same SAE weights is left alone;
# resumable after an interruption.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS=${TOKENS:-299904}
for sae in assets/saes/*/; do
  sae=${sae%/}
  [ -f "$sae/cfg.json" ] || continue
  out="assets/sae_stores/$(basename "$sae")"
  nice -n 10 .venv/bin/interpscope sae store --sae "$sae" --tokens "$TOKENS" --eval-tokens 4096 --from-cache \
    --out "$out" --force
done
