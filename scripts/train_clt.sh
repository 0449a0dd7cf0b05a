#!/usr/bin/env bash
# Train and ship a cross-layer transcoder (assets/clt/<model>); resumable, see the .py.
cd "$(dirname "$0")/.." && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exec nice -n 10 .venv/bin/python scripts/train_clt.py "$@"
