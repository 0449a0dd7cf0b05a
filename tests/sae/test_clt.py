"""Cross-layer transcoders: the prediction at layer t sums the decoders of layers 0..t (plus the skip), folders
round-trip in circuit-tracer's layout and Gemma Scope 2's per-layer files read as the same CLT, and the spliced
evaluation of each target layer equals an independent computation (and, with no cross-layer decoders, the
per-layer transcoders' evaluation of the same weights)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from interpscope.config import InterpscopeError
from interpscope.sae.clt import CrossLayerTranscoder, evaluate_clt, load_clt, save_clt

L, D_IN, D_SAE, D_OUT = 3, 6, 10, 5


def _random_clt(skip: bool = True, seed: int = 0, n_layers: int = L, d_in: int = D_IN, d_out: int = D_OUT,
                d_sae: int = D_SAE) -> CrossLayerTranscoder:
    clt = CrossLayerTranscoder(n_layers, d_in, d_sae, d_out, skip=skip, model_name="m")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in clt.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) / 2)
        clt.threshold.abs_()
    return clt


def test_each_layer_sums_the_decoders_of_the_layers_before_it():
    clt = _random_clt()
    xs = torch.randn(L, 7, D_IN, generator=torch.Generator().manual_seed(1))
    f = clt.encode(xs)
    for i in range(L):
        z = xs[i] @ clt.W_enc[i] + clt.b_enc[i]
        assert torch.allclose(f[i], torch.where(z > clt.threshold[i], z, torch.zeros_like(z)))
    y = clt(xs)
    for t in range(L):
        expected = clt.b_dec[t] + xs[t] @ clt.W_skip[t]
        for i in range(t + 1):
            expected = expected + f[i] @ clt.W_dec[i][:, t - i]
        assert torch.allclose(y[t], expected, atol=1e-5)
    assert clt.decoder_rows(1, 4).shape == (L - 1, D_OUT)
    view = clt.layer_view(2)
    flat = xs[:3].permute(1, 0, 2).reshape(7, 3 * D_IN)
    assert torch.allclose(view(flat), y[2], atol=1e-5) and view.cfg.d_sae == 3 * D_SAE


def test_circuit_tracer_layout_round_trips(tmp_path):
    clt = _random_clt(seed=2)
    save_clt(clt, tmp_path / "clt")
    enc = load_file(str(tmp_path / "clt" / "W_enc_1.safetensors"))
    dec = load_file(str(tmp_path / "clt" / "W_dec_1.safetensors"))
    assert enc["W_enc_1"].shape == (D_SAE, D_IN) and dec["W_dec_1"].shape == (D_SAE, L - 1, D_OUT)  # circuit-tracer's
    back = load_clt(tmp_path / "clt")
    assert back.hook_in == "blocks.{layer}.mlp.hook_in" and back.model_name == "m" and back.skip
    for (name, a), (_, b) in zip(clt.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    save_file({"W_dec_1": torch.zeros(D_SAE, L, D_OUT)}, str(tmp_path / "clt" / "W_dec_1.safetensors"))
    with pytest.raises(InterpscopeError, match="W_dec_1 has shape"):
        load_clt(tmp_path / "clt")


def test_gemma_scope_2_clt_files_read_as_the_same_clt(tmp_path):
    clt = _random_clt(seed=3)
    folder = tmp_path / "clt" / "width_16k_l0_small_affine"
    folder.mkdir(parents=True)
    for i in range(L):
        w_dec = torch.zeros(D_SAE, L, D_OUT)  # Gemma Scope 2 stores every target layer; those before i unused
        w_dec[:, i:] = clt.W_dec[i].detach()
        save_file({"w_enc": clt.W_enc[i].detach().contiguous(), "w_dec": w_dec, "b_enc": clt.b_enc[i].detach(),
                   "b_dec": clt.b_dec[i].detach(), "threshold": clt.threshold[i].detach(),
                   "affine_skip_connection": clt.W_skip[i].detach().contiguous()},
                  str(folder / f"params_layer_{i}.safetensors"))
    back = load_clt(folder)
    xs = torch.randn(L, 4, D_IN, generator=torch.Generator().manual_seed(4))
    assert back.skip and torch.allclose(back(xs), clt(xs), atol=1e-6)
    (folder / "params_layer_1.safetensors").unlink()
    with pytest.raises(InterpscopeError, match="one file per layer"):
        load_clt(folder)


@pytest.fixture(scope="module")
def gemma():
    from tests.tiny import loaded as wrap_loaded
    from tests.tiny import tiny_gemma3

    torch.set_num_threads(1)
    return wrap_loaded(tiny_gemma3(), None, name="tiny-gemma3")


def _ids() -> torch.Tensor:
    return torch.randint(3, 64, (8, 16), generator=torch.Generator().manual_seed(0))


def test_spliced_evaluation_matches_an_independent_computation(gemma):
    from interpscope.capture import capture

    d = gemma.adapter.d_model
    n_layers = gemma.adapter.n_layers
    clt = _random_clt(seed=5, n_layers=n_layers, d_in=d, d_out=d, d_sae=24).double()
    with torch.no_grad():
        clt.threshold.mul_(0.2)
    ids = _ids()
    report = evaluate_clt(gemma, clt, ids=ids, batch_size=4)
    hooks_in = [clt.hook_in_name(i) for i in range(n_layers)]
    hooks_out = [clt.hook_out_name(i) for i in range(n_layers)]
    acts = capture(gemma.adapter, ids, hooks_in + hooks_out).activations
    xs = torch.stack([acts[h][:, 1:].reshape(-1, d).double() for h in hooks_in])
    with torch.no_grad():
        y_hat = clt(xs)
    for t, layer_report in enumerate(report.layers):
        assert layer_report.sink_tokens == 0
        y = acts[hooks_out[t]][:, 1:].reshape(-1, d).double()
        fvu = float((y - y_hat[t]).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
        assert layer_report.fvu == pytest.approx(fvu, rel=1e-6)
        assert 0 < layer_report.l0 < (t + 1) * 24


def test_without_cross_layer_decoders_a_clt_evaluates_as_per_layer_transcoders(gemma):
    from interpscope.sae import SAEConfig, build_sae
    from interpscope.sae.transcoder_eval import evaluate_transcoders

    d = gemma.adapter.d_model
    clt = _random_clt(seed=6, n_layers=gemma.adapter.n_layers, d_in=d, d_out=d, d_sae=16)
    with torch.no_grad():
        clt.threshold.mul_(0.2)
        for i in range(clt.n_layers):
            clt.W_dec[i][:, 1:] = 0.0
    ids = _ids()
    report = evaluate_clt(gemma, clt, ids=ids, layers=[1])
    cfg = SAEConfig(d_in=d, d_sae=16, architecture="jumprelu_transcoder", hook_name="blocks.1.mlp.hook_in",
                    extra={"d_out": d, "hook_name_out": "blocks.1.hook_mlp_out", "skip": True})
    tc = build_sae(cfg, seed=None)
    with torch.no_grad():
        tc.W_enc.copy_(clt.W_enc[1])
        tc.b_enc.copy_(clt.b_enc[1])
        tc.threshold.copy_(clt.threshold[1])
        tc.b_dec.copy_(clt.b_dec[1])
        tc.W_skip.copy_(clt.W_skip[1])
        tc.W_dec.copy_(clt.W_dec[1][:, 0])
    single = evaluate_transcoders(gemma, [tc], ids=ids)[0]
    # layer 0's features still write to layer 1 through W_dec[0][:, 1]: zeroed above, so only layer 1's count
    assert report.layers[0].fvu == pytest.approx(single.fvu, rel=1e-6)
    assert report.layers[0].loss_recovered == pytest.approx(single.loss_recovered, rel=1e-6)


def test_a_clt_of_another_shape_is_refused(gemma):
    clt = _random_clt(n_layers=gemma.adapter.n_layers, d_in=7, d_out=7)
    with pytest.raises(InterpscopeError, match="Shape mismatch at layer 0"):
        evaluate_clt(gemma, clt, ids=_ids())
    with pytest.raises(InterpscopeError, match="spans 3 layers"):
        evaluate_clt(gemma, _random_clt(n_layers=3, d_in=gemma.adapter.d_model, d_out=gemma.adapter.d_model),
                     ids=_ids())


def test_a_circuit_tracer_per_layer_set_loads_as_a_transcoder_set(tmp_path):
    """circuit-tracer's layer_<i>.safetensors (W_enc [d_sae, d], applied as F.linear; W_skip as x @ W_skip.T) with
    config.yaml: the set computes what circuit-tracer's SingleLayerTranscoder computes from the raw tensors."""
    import yaml

    from interpscope.sae.arch.jumprelu_transcoder import JumpReLUTranscoder
    from interpscope.sae.transcoder_set import load_transcoder_set

    folder = tmp_path / "set"
    folder.mkdir()
    gen = torch.Generator().manual_seed(7)
    raw = []
    for layer in range(2):
        tensors = {"W_enc": torch.randn(D_SAE, D_IN, generator=gen), "W_dec": torch.randn(D_SAE, D_IN, generator=gen),
                   "b_enc": torch.randn(D_SAE, generator=gen), "b_dec": torch.randn(D_IN, generator=gen),
                   "activation_function.threshold": torch.rand(D_SAE, generator=gen),
                   "W_skip": torch.randn(D_IN, D_IN, generator=gen)}
        save_file(tensors, str(folder / f"layer_{layer}.safetensors"))
        raw.append(tensors)
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "model_name": "google/gemma-3-270m", "model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in",
        "feature_output_hook": "hook_mlp_out"}))
    tset = load_transcoder_set(folder)
    assert tset.n_layers == 2 and tset.model_name == "gemma3-270m"
    x = torch.randn(9, D_IN, generator=torch.Generator().manual_seed(8))
    for layer, tc in enumerate(tset.transcoders):
        t = raw[layer]
        assert isinstance(tc, JumpReLUTranscoder) and tc.skip
        assert (tc.cfg.hook_name, tc.hook_name_out) == (f"blocks.{layer}.mlp.hook_in", f"blocks.{layer}.hook_mlp_out")
        pre = torch.nn.functional.linear(x, t["W_enc"], t["b_enc"])
        acts = pre * (pre > t["activation_function.threshold"])
        expected = acts @ t["W_dec"] + t["b_dec"] + x @ t["W_skip"].T
        assert torch.allclose(tc(x), expected, atol=1e-5)
    save_file({**raw[1], "k": torch.tensor(8)}, str(folder / "layer_1.safetensors"))
    with pytest.raises(InterpscopeError, match="TopK"):
        load_transcoder_set(folder)
