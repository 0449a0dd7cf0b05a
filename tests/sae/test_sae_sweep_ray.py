"""A sweep sharded on a local 2-worker Ray cluster (each worker trains whole SAEs from the same cache on disk) gives
the table one process gives. Workers are other processes, so the model is a tiny GPT-2 saved as a folder."""
from __future__ import annotations

import json
import os

import pytest

from interpscope.models import load_model
from interpscope.sae.sweep import SweepSettings, grid, run_sweep
from interpscope.scale import Scale
from tests.sae_store_tiny import HOOK, save_tiny_lm


def test_a_sweep_on_ray_workers_gives_the_single_process_table(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import ray

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    lm = load_model(str(save_tiny_lm(tmp_path / "model")), device="cpu")
    specs = grid(["relu", "topk"], 32, {"*": [1.0]}, {"*": [4]})
    settings = SweepSettings(model_name=lm.name, hook_name=HOOK, width=32, tokens=512, cache_tokens=1024,
                             context_size=32, batch_size=256, warmup_steps=1)
    here = run_sweep(lm, specs, settings, tmp_path / "one", eval_tokens=128)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        scale = Scale(workers=2, shard_batches=1)
        there = run_sweep(lm, specs, settings, tmp_path / "ray", eval_tokens=128, scale=scale)
    finally:
        ray.shutdown()
    trained_in = {json.loads((tmp_path / "ray" / r["folder"] / "train.json").read_text())["process"]
                  for r in there.rows}
    assert os.getpid() not in trained_in  # the SAEs were trained by the workers
    assert [r["name"] for r in there.rows] == [r["name"] for r in here.rows]
    for a, b in zip(here.rows, there.rows, strict=True):
        for key in ("l0", "fvu", "loss_recovered", "shrinkage", "dead_fraction"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
