#!/usr/bin/env bash
# Rebuild the shipped SAE sweep (assets/sae_sweeps/smollm2-135m-blocks.15-resid-post): SAEs of width 576 on
# SmolLM2-135M's residual stream after block 15, four sparsity settings per architecture (L1 1,2,4,8 for ReLU and
# Gated; k 8,16,32,64 for TopK, BatchTopK, Matryoshka; L0 coefficient 1,2,4,8 for JumpReLU), 1,003,520 training tokens
# each from one activation cache, all evaluated on the same 4,096 held-out tokens (test split). Stages, in one
# resumable folder (a rerun never retrains a finished SAE): relu,gated (the Gated paper's comparison), then topk,
# then jumprelu, batchtopk, matryoshka. The default, STAGES=3, runs all three: what the shipped sweep holds (see
# its README). Two Ray workers of one thread each (WORKERS=2): about 37 min on a quiet 2-core machine (activation
# cache 6.5 min, training 24 min, evaluation 5.5 min). Then copies the table and the frontier SAEs' weights (float16)
# into assets/.
# One torch thread: on the shared 2-core machine two threads ran four times slower under contention.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
OUT=${OUT:-build/sae_sweep_smollm2}
COMMON=(--model smollm2-135m --hook blocks.15.hook_resid_post --width 576 --tokens 1000000 --cache-tokens 300000
        --eval-tokens 4096 --save-dtype float16 --sparsity 1,2,4,8 --k 8,16,32,64 --out "$OUT")
STAGES=${STAGES:-3}
ARCHS=(relu,gated relu,gated,topk relu,gated,topk,jumprelu,batchtopk,matryoshka)
for stage in $(seq 1 "$STAGES"); do
  nice -n 15 .venv/bin/interpscope sae sweep "${COMMON[@]}" --archs "${ARCHS[$((stage - 1))]}" \
    --workers "${WORKERS:-2}"
done
.venv/bin/python scripts/ship_sae_sweep.py "$OUT" assets/sae_sweeps/smollm2-135m-blocks.15-resid-post
