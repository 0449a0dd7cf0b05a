"""The sparse-aware training kernels give the same losses and gradients as plain dense autograd (float64)."""
from __future__ import annotations

import pytest
import torch

from interpscope.sae.architectures import SAEConfig, build_sae
from interpscope.sae.sparse_ops import DENSE_ABOVE


def _pair(arch: str):
    cfg = dict(d_in=16, d_sae=400, architecture=arch, k=6)
    dense = build_sae(SAEConfig(**cfg), dtype=torch.float64, seed=3)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for param in dense.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * 0.5)
        for name in ("b_enc", "b_gate"):
            if hasattr(dense, name):
                getattr(dense, name).sub_(4.0)  # few features fire: the sparse path is taken
    sparse = build_sae(SAEConfig(**cfg), dtype=torch.float64, seed=3)
    sparse.load_state_dict(dense.state_dict())
    sparse.sparse_training = True
    if arch == "topk":
        dense.dead_mask[:50] = True
        sparse.dead_mask[:50] = True
    return dense, sparse


@pytest.mark.parametrize("arch", ["relu", "gated", "topk", "jumprelu"])
def test_sparse_kernels_match_dense_autograd(arch):
    dense, sparse = _pair(arch)
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    out_dense = dense.loss(x, 0.3)
    out_sparse = sparse.loss(x, 0.3)
    density = float((out_sparse.features != 0).double().mean())
    assert 0 < density <= DENSE_ABOVE, density
    out_dense.total.backward()
    out_sparse.total.backward()
    torch.testing.assert_close(out_sparse.total, out_dense.total, rtol=1e-10, atol=1e-10)
    for (name, p_dense), (_, p_sparse) in zip(dense.named_parameters(), sparse.named_parameters(), strict=True):
        assert p_dense.grad is not None, name
        torch.testing.assert_close(p_sparse.grad, p_dense.grad, rtol=1e-9, atol=1e-10, msg=name)
