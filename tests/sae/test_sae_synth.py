"""Synthetic ground truth (issue 42): the matching, the controls, a planted absorption, short runs that end below
FVU 1 for every architecture (the transcoder included) and the `sae synth` command."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from interpscope.cli import main
from interpscope.sae.architectures import SAEConfig, build_sae
from interpscope.sae.l0_proxy import decoder_cosine, proxy_l0
from interpscope.sae.pipeline import SAESpec
from interpscope.sae.sweep import SweepSettings, build_point
from interpscope.sae.synth import (
    SynthData,
    SynthSpec,
    absorption,
    linear_assignment,
    random_dictionary,
    score_decoder,
)
from interpscope.sae.synth_run import SYNTH_ARCHS, SynthSettings, default_grid, run_synth, score_sae
from interpscope.sae.training import TrainConfig, Trainer, batch_fvu

TINY = dict(n_features=48, d_model=24, target_l0=3.0, n_correlated=8, n_parents=4, children=2, noise=0.1)


def test_linear_assignment_is_the_minimum_over_all_matchings():
    rng = np.random.default_rng(0)
    for n, m in [(1, 1), (3, 3), (4, 2), (2, 5), (5, 5)]:
        cost = rng.random((n, m))
        rows, cols = linear_assignment(cost)
        best = min(sum(cost[i, j] for i, j in (zip(range(n), p, strict=False) if n <= m
                                              else zip(p, range(m), strict=False)))
                   for p in itertools.permutations(range(max(n, m)), min(n, m)))
        assert len(rows) == min(n, m) and len(set(rows)) == len(rows) and len(set(cols)) == len(cols)
        assert cost[rows, cols].sum() == pytest.approx(best, abs=1e-12)


def test_generator_hits_its_l0_and_children_fire_only_with_their_parent():
    data = SynthData(SynthSpec(**TINY))
    x, codes = data.batch(0, 8192)
    assert (codes > 0).sum(1).mean() == pytest.approx(data.expected_l0, rel=0.05)
    for parent, kids in data.child_of.items():
        assert not ((codes[:, kids] > 0).any(1) & (codes[:, parent] == 0)).any()
        assert (codes[:, kids] > 0).any()
    group = codes[:, :4] > 0  # one correlated group: its members fire together more often than independence says
    joint, apart = (group[:, 0] & group[:, 1]).mean(), group[:, 0].mean() * group[:, 1].mean()
    assert joint > 2 * apart
    again, _ = data.batch(0, 8192)
    assert np.array_equal(x, again)  # a batch is a function of (seed, index)
    assert data.reference(4096)["fvu"] < 0.05


def _sae_with_decoder(decoder: np.ndarray):
    n, d = decoder.shape
    sae = build_sae(SAEConfig(d_in=d, d_sae=n, architecture="relu"), seed=0)
    with torch.no_grad():
        sae.W_dec.copy_(torch.as_tensor(decoder, dtype=torch.float32))
    return sae


def test_true_dictionary_scores_one_and_a_random_one_chance():
    data = SynthData(SynthSpec(n_features=128, d_model=256, target_l0=4, n_correlated=16, n_parents=4))
    x, codes = data.batch(0, 512)
    true = score_sae(_sae_with_decoder(data.directions), data, x, codes)
    random = score_sae(_sae_with_decoder(random_dictionary(128, 256, seed=3)), data, x, codes)
    assert true["mcc"] > 0.99 and true["recovery"] == 1.0
    assert random["mcc"] < 0.2 and random["recovery"] == 0.0
    permuted = score_decoder(data.directions[::-1] * 2.0, data.directions)  # order and scale do not matter
    assert permuted["mcc"] == pytest.approx(1.0) and (permuted["match"] == np.arange(128)[::-1]).all()


def _planted_sae(data: SynthData, absorb: tuple[int, int] | None):
    """A ReLU SAE that reads the codes exactly (pseudo-inverse encoder, no noise); with `absorb` = (parent, child),
    the parent's latent is silenced where the child fires and the child's latent carries the parent's direction."""
    directions = data.directions
    enc = np.linalg.pinv(directions)  # [d, N]: x @ enc = codes
    dec = directions.copy()
    if absorb:
        parent, child = absorb
        enc[:, parent] = enc[:, parent] - 2 * enc[:, child]
        dec[child] = directions[parent] + directions[child]
        dec[child] /= np.linalg.norm(dec[child])
    sae = build_sae(SAEConfig(d_in=directions.shape[1], d_sae=directions.shape[0], architecture="relu"), seed=0)
    with torch.no_grad():
        sae.W_enc.copy_(torch.as_tensor(enc, dtype=torch.float32))
        sae.W_dec.copy_(torch.as_tensor(dec, dtype=torch.float32))
        sae.b_dec.zero_()
        sae.b_enc.fill_(-0.5)
    return sae


def test_planted_hierarchical_absorption_is_reported():
    spec = SynthSpec(n_features=16, d_model=24, target_l0=3, n_correlated=0, n_parents=2, children=2,
                     child_rate=0.6, magnitude_std=0.0, noise=0.0)
    data = SynthData(spec)
    x, codes = data.batch(0, 4096)
    parent = int(data.parents[0])
    child, other = data.child_of[parent]
    absorbed = absorption(score_codes(_planted_sae(data, (parent, child)), x), data.directions, data, codes)
    by_pair = {(p["parent"], p["child"]): p for p in absorbed["pairs"]}
    assert by_pair[(parent, child)]["absorbed"] and by_pair[(parent, child)]["absorption"] == pytest.approx(1.0)
    assert by_pair[(parent, other)]["absorption"] == pytest.approx(0.0)  # the other child leaves the parent alone
    assert absorbed["absorbed_pairs"] == 1
    control = absorption(score_codes(_planted_sae(data, None), x), data.directions, data, codes)
    assert control["absorbed_pairs"] == 0 and control["absorption"] == pytest.approx(0.0)


def score_codes(sae, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return sae.encode(torch.from_numpy(x)).numpy()


def test_every_architecture_short_run_ends_below_fvu_one():
    """Two steps at the sweep's warm-up learning rate: the run must not end worse than predicting the mean."""
    spec = SynthSpec(**TINY)
    specs = [SAESpec(arch, 48, k=3) if SAESpec(arch, 48).arch_class.knob.is_count else SAESpec(arch, 48)
             for arch in SYNTH_ARCHS]
    result = run_synth(spec, specs, SynthSettings(tokens=2 * 1024, batch_size=1024, lr=7e-4, eval_rows=2048))
    assert {r["architecture"] for r in result.rows} == {"relu", "gated", "topk", "jumprelu", "batchtopk",
                                                        "matryoshka"}
    for row in result.rows:
        assert row["fvu"] < 1.0, row


def _paired_rows(generator: torch.Generator, n: int, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """[x_in | y]: a wide input and a small MLP-like output of it (the input's squared norm ~25x the output's)."""
    x_in = torch.randn(n, A.shape[0], generator=generator) * 5 + 2
    y = torch.relu(x_in @ A - 1.0) @ B + 0.5
    return torch.cat([x_in, y], 1)


def test_transcoder_short_sweep_run_ends_below_fvu_one():
    """Issue 42: `sae sweep --archs transcoder` on 8,192 tokens ended at FVU 1.79; the sweep's own point builder,
    schedule and learning rate, two steps, on paired rows whose input dwarfs its target."""
    generator = torch.Generator().manual_seed(0)
    d = 32
    A = torch.randn(d, 64, generator=generator) / d ** 0.5
    B = torch.randn(64, d, generator=generator) * 0.05
    rows = _paired_rows(generator, 8192 + 4096, A, B)
    scale = float((2 * d / rows[:8192].pow(2).sum(1).mean()) ** 0.5)  # the sweep's E||s x||^2 = d_in
    rows = rows * scale
    settings = SweepSettings(model_name="m", hook_name="blocks.0.hook_resid_mid",
                             target_hook="blocks.0.hook_mlp_out", width=64, tokens=8192)
    run = build_point(SAESpec("transcoder", 64, sparsity=5.0), "tc", 2 * d, settings)

    class Rows:
        batches_served = 0

        def batches(self):
            while True:
                start = self.batches_served * 4096 % 8192
                self.batches_served += 1
                yield rows[start:start + 4096]

    cfg = TrainConfig(total_tokens=8192, batch_size=4096, lr=settings.lr, warmup_steps=settings.warmup_steps)
    Trainer([run], Rows(), cfg).train()  # type: ignore[arg-type]
    held_out = rows[8192:]
    with torch.no_grad():
        y_hat = run.sae.loss(held_out, 0.0).x_hat
    assert batch_fvu(held_out[:, d:], y_hat) < 1.0


def test_decoder_cosine_and_proxy():
    assert decoder_cosine(np.eye(4)) == pytest.approx(0.0)
    assert decoder_cosine(np.ones((3, 4))) == pytest.approx(1.0)
    assert decoder_cosine(np.vstack([np.eye(4), np.ones((1, 4))]), live=np.array([1, 1, 1, 1, 0])) == \
        pytest.approx(0.0)
    points = [{"name": n, "l0": l0, "c_dec": c} for n, l0, c in [("a", 4, 0.3), ("b", 8, 0.1), ("c", 16, 0.2)]]
    proxy = proxy_l0(points, "x")
    assert proxy.proxy_l0 == 8 and proxy.below == ["a"] and not proxy.at_edge
    assert proxy_l0(points[:2], "x").proxy_l0 is None


def test_default_grid_brackets_the_true_l0_with_the_ladder():
    specs = default_grid(12.0, 64)
    ks = sorted(s.k for s in specs if s.arch == "batchtopk")
    assert ks == [3, 6, 12, 24, 48]
    assert {s.k for s in specs if s.arch == "topk"} == {12}


def test_cli_document_equals_the_api_and_bad_input_exits_2(tmp_path, capsys):
    args = ["--n-features", "48", "--d-model", "24", "--l0", "3", "--correlated", "8", "--parents", "4",
            "--archs", "topk,relu", "--set", "relu=1", "--tokens", "2048", "--batch-size", "1024",
            "--eval-rows", "1024", "--noise", "0.1"]
    out = tmp_path / "synth.json"
    assert main(["sae", "synth", *args, "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["schema"] == "interpscope.sae_synth" and document["schema_version"] == 1
    spec = SynthSpec(**TINY)
    api = run_synth(spec, default_grid(SynthData(spec).expected_l0, 48, ("topk", "relu"), {"relu": [1.0]}),
                    SynthSettings(tokens=2048, batch_size=1024, eval_rows=1024)).to_dict()
    for doc in (document, api):
        doc.pop("seconds")
    assert document == json.loads(json.dumps(api))
    capsys.readouterr()
    for bad, words in [(["--archs", "transcoder"], "transcoder maps one activation"),
                       (["--correlated", "100"], "exceed n_features"),
                       (["--archs", "nope"], "nope"),
                       (["--tokens", "10"], "at least one batch")]:
        assert main(["sae", "synth", *args, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err


def test_sweep_proxy_reads_live_c_dec_or_falls_back_to_weights(tmp_path):
    from safetensors.numpy import save_file

    from interpscope.sae.l0_proxy import PROXY_FILE, sweep_points
    from interpscope.sae.sweep_docs import SweepTable

    rows = [{"name": f"topk-8-k{k}", "folder": f"topk-8-k{k}", "architecture": "topk", "label": "TopK", "l0": k}
            for k in (1, 2, 4)]
    table = SweepTable(model_name="m", hook_name="h", width=8, tokens_per_sae=1, cache_tokens=1, eval={}, rows=rows)
    for row, decoder in zip(rows, [np.eye(8), np.ones((8, 8)), np.eye(8)], strict=True):
        (tmp_path / row["folder"]).mkdir()
        save_file({"W_dec": decoder.astype(np.float32)}, str(tmp_path / row["folder"] / "sae_weights.safetensors"))
    points, source = sweep_points(table, tmp_path)
    assert [p["c_dec"] for p in points["topk"]] == pytest.approx([0.0, 1.0, 0.0])
    assert "dead latents included, for 3" in source
    (tmp_path / PROXY_FILE).write_text(json.dumps({"c_dec": {"topk-8-k1": 0.3, "topk-8-k2": 0.1, "topk-8-k4": 0.2}}))
    points, source = sweep_points(table, tmp_path)
    proxy = proxy_l0(points["topk"], "topk")
    assert "latents that fired on held-out activations for 3" in source
    assert proxy.proxy_l0 == 2 and proxy.below == ["topk-8-k1"]
