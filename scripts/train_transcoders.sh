#!/usr/bin/env bash
# Rebuild the shipped per-layer transcoders of SmolLM2-135M (assets/transcoders/smollm2-135m); resumable, see the .py.
cd "$(dirname "$0")/.." && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exec nice -n 10 .venv/bin/python scripts/train_transcoders.py "$@"
