"""An SAE used inside a forward pass on another device gets a copy there; the original never moves."""
import torch

from interpscope.sae import SAEConfig, build_sae
from interpscope.sae.placement import on_device


def _sae():
    return build_sae(SAEConfig(d_in=8, d_sae=12, model_name="tiny", hook_name="blocks.0.hook_resid_post",
                               hook_layer=0), seed=0)


def test_an_sae_already_on_the_device_is_used_as_it_is():
    sae = _sae()
    assert on_device(sae, "cpu") is sae
    assert on_device(sae, torch.device("cpu")) is sae


def test_another_device_gets_one_copy_and_the_original_stays():
    sae = _sae()
    before = {name: p.detach().clone() for name, p in sae.named_parameters()}
    moved = on_device(sae, "meta")  # a device every machine has: shapes without storage
    assert moved is not sae
    assert all(p.device.type == "meta" for p in moved.parameters())
    assert {n: p.shape for n, p in moved.named_parameters()} == {n: p.shape for n, p in before.items()}
    assert on_device(sae, "meta") is moved  # made once per SAE and device
    for name, p in sae.named_parameters():  # the shared original is untouched, still on the CPU
        assert p.device.type == "cpu" and torch.equal(p, before[name])
    assert on_device(_sae(), "meta") is not moved  # per SAE, not per shape
