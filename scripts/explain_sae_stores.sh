#!/usr/bin/env bash
# Write and score the explanations of the shipped feature stores (assets/sae_stores/*/explanations.jsonl) with the
# bundled SmolLM2-135M-Instruct as the writer and the lexical detection simulator as the scorer. Resumable: features
# already in a store's explanations.jsonl are skipped, so rerunning after an interruption finishes the rest.
# Each store's live features go most-frequent first. ~0.5-1 s per feature on a quiet 2-core CPU.
# STORES="name ..." picks stores (default: all shipped ones).
set -euo pipefail
cd "$(dirname "$0")/.."
STORES=${STORES:-$(ls assets/sae_stores)}
for name in $STORES; do
  store="assets/sae_stores/$name"
  order=$(.venv/bin/python -c "
import numpy as np, sys
fc = np.load(sys.argv[1] + '/fire_count.npy')
print(','.join(str(int(i)) for i in np.argsort(-fc, kind='stable') if fc[i] > 0))" "$store")
  nice -n 10 .venv/bin/interpscope sae explain --store "$store" --features "$order"
done
