#!/usr/bin/env bash
# Rebuild the shipped SAE sweep (assets/sae_sweeps/smollm2-135m-blocks.15-resid-post): ReLU, Gated and TopK SAEs
# (then JumpReLU, BatchTopK and Matryoshka BatchTopK when time allows) of width 576 on SmolLM2-135M's residual stream
# after block 15, four sparsity settings each, 1,003,520 training tokens each from one activation cache, all
# evaluated on the same 4,096 held-out tokens (test split). Resumable: rerun after an interruption (finished SAEs are
# not retrained). Then copies the table and the frontier SAEs' weights (float16) into assets/.
#
# STEPS=first runs only relu,gated,topk (what was shipped, see the README there); STEPS=all the six architectures.
# One torch thread: on the shared 2-core machine two threads ran four times slower under contention.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
OUT=${OUT:-build/sae_sweep_smollm2}
STEPS=${STEPS:-first}
COMMON=(--model smollm2-135m --hook blocks.15.hook_resid_post --width 576 --tokens 1000000 --cache-tokens 300000
        --eval-tokens 4096 --save-dtype float16 --sparsity 1,2,4,8 --k 8,16,32,64 --out "$OUT")
ARCHS=relu,gated,topk
if [ "$STEPS" = all ]; then ARCHS=relu,gated,topk,jumprelu,batchtopk,matryoshka; fi
nice -n 15 .venv/bin/interpscope sae sweep "${COMMON[@]}" --archs "$ARCHS" --set jumprelu=0.25,0.5,1,2
.venv/bin/python scripts/ship_sae_sweep.py "$OUT" assets/sae_sweeps/smollm2-135m-blocks.15-resid-post
