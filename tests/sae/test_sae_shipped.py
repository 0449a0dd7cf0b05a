"""The shipped SAEs (assets/saes: ReLU 'standard' and Gated, float16) and their stores still load, hold the
folder's weights bit for bit, and encode exactly as their formulas (in float32 on the folder's tensors; in float16
on the SAE's own copies, whose memory layout picks the same half-precision kernels)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from interpscope.sae import load_sae
from interpscope.sae.catalog import SHIPPED_DIR, describe
from interpscope.sae.store import FeatureStore

SHIPPED = sorted(path for path in SHIPPED_DIR.iterdir() if (path / "cfg.json").is_file())


def _expected(tensors: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """docs/methods/sae.md: ReLU SAE, or the gated SAE's gate * ReLU(magnitude), on x - b_dec."""
    shared = (x - tensors["b_dec"]) @ tensors["W_enc"]
    if "b_gate" in tensors:
        gate = shared + tensors["b_gate"]
        magnitude = shared * torch.exp(tensors["r_mag"]) + tensors["b_mag"]
        return (gate > 0).to(magnitude.dtype) * torch.relu(magnitude)
    return torch.relu(shared + tensors["b_enc"])


def test_both_shipped_saes_are_found():
    assert {describe(path)["architecture"] for path in SHIPPED} == {"standard", "gated"}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda path: path.name)
@pytest.mark.parametrize("dtype", ["float32", None])
def test_shipped_sae_encodes_exactly_as_its_formula(folder, dtype):
    raw = load_file(str(folder / "sae_weights.safetensors"))
    assert raw["W_enc"].dtype == torch.float16
    sae = load_sae(folder, dtype=dtype)
    target = torch.float32 if dtype else torch.float16
    tensors = {name: tensor.to(target) for name, tensor in raw.items()}
    own = {name: tensor.detach() for name, tensor in sae.state_dict().items()}
    assert set(own) == set(tensors) and all(torch.equal(own[name], tensors[name]) for name in tensors)
    if dtype is None:
        tensors = own
    x = (torch.randn(64, sae.cfg.d_in, generator=torch.Generator().manual_seed(0)) * 3).to(target)
    with torch.no_grad():
        f = sae.encode(x)
        expected = _expected(tensors, x)
        assert 0 < float((f > 0).float().sum(-1).mean()) < sae.cfg.d_sae / 4
        assert torch.equal(f, expected)
        assert torch.equal(sae.decode(f), expected @ tensors["W_dec"] + tensors["b_dec"])


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda path: path.name)
def test_shipped_store_belongs_to_its_sae_and_loads_it(folder):
    store = FeatureStore.for_sae(folder)
    assert not store.is_stale()
    sae = store.load_sae()
    assert store.manifest["sae_cfg"]["architecture"] == sae.cfg.architecture
    assert store.d_sae == sae.cfg.d_sae and store.spec["hook_name"] == sae.cfg.hook_name
