#!/usr/bin/env bash
# Rebuild the shipped SAEs (assets/saes/): a ReLU and a Gated SAE on SmolLM2-135M's residual stream after block 15
# (of 30), width 4608 (8 x d_model 576), trained together from one cached activation set of the bundled corpus.
# Resumable: rerun the same command after an interruption (both the activation cache and the training resume).
# If it has to stop early, export the newest checkpoint with:
#   .venv/bin/python -c "from interpscope.sae.pipeline import export_checkpoint; export_checkpoint('$OUT', 'float16')"
#
# The shipped pair was made with exactly this command (OUT=/tmp/sae5m) on the 2-core CPU with nothing else running:
# caching 297,561 activation rows (~1,050 tokens/s through SmolLM2 up to block 15, 3.9 min) then 1,221 steps of
# 4,096 rows = 5,001,216 tokens for each SAE (~17 passes over the cached train split), 2.2 s per step for both SAEs
# together (44 min; ~3,750 SAE-tokens/s). cfg.json "training_tokens" and metadata.interpscope ("cache_rows",
# "final_log") record it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/interpscope_sae_run}
TOKENS=${TOKENS:-5000000}
nice -n 10 .venv/bin/interpscope sae train --model smollm2-135m --hook blocks.15.hook_resid_post \
  --arch relu,gated --l1 5,5 --width 4608 --tokens "$TOKENS" --cache-tokens 300000 --context 128 \
  --batch-size 4096 --lr 7e-4 --warmup-steps 20 --decay-fraction 0 --resample-at 0.1,0.2 \
  --dead-window-tokens 300000 --checkpoint-every 10 --save-dtype float16 --out "$OUT"
mkdir -p assets/saes
for name in relu gated; do
  rm -rf "assets/saes/smollm2-135m-blocks.15-$name-4608"
  cp -r "$OUT/$name-4608-l5" "assets/saes/smollm2-135m-blocks.15-$name-4608"
  rm -f "assets/saes/smollm2-135m-blocks.15-$name-4608/history.json.tmp"
done
