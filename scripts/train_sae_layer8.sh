#!/usr/bin/env bash
# Rebuild the second shipped SAE (for feature circuits): a Gated SAE on SmolLM2-135M's residual stream after block 8
# (of 30), width 4608, trained exactly like the block-15 pair (scripts/train_saes.sh): 300k cached tokens of the
# bundled corpus's train split, 5,000,000 training tokens, L1 5, lr 7e-4, resampling at 10% and 20%.
# Resumable: rerun the same command after an interruption.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/interpscope_sae_layer8}
TOKENS=${TOKENS:-5000000}
nice -n 10 .venv/bin/interpscope sae train --model smollm2-135m --hook blocks.8.hook_resid_post \
  --arch gated --l1 5 --width 4608 --tokens "$TOKENS" --cache-tokens 300000 --context 128 \
  --batch-size 4096 --lr 7e-4 --warmup-steps 20 --decay-fraction 0 --resample-at 0.1,0.2 \
  --dead-window-tokens 300000 --checkpoint-every 10 --save-dtype float16 --out "$OUT"
mkdir -p assets/saes
target="assets/saes/smollm2-135m-blocks.8-gated-4608"
if [ -e "$target" ]; then
  echo "$target exists; remove it yourself to replace it (this script never deletes a folder it did not create)" >&2
  exit 2
fi
cp -r "$OUT/gated-4608-l5" "$target"
rm -f "$target/history.json.tmp"
