"""A family is data: `register_family` with a layout (where its modules sit) is all a Llama-like family needs, and
the new family then appears everywhere a family applies (model types, capabilities, the methods it can run, hook
points, LRP conservation, attribution graphs' architecture check), with no other edit."""
from __future__ import annotations

import pytest
import torch

from interpscope.adapters import ADAPTERS, family_of, get_adapter, register_family
from interpscope.adapters.layout import LLAMA, Layout, at
from interpscope.adapters.llama import LlamaAdapter
from interpscope.relevance.methods import methods_for
from tests.tiny import relevance_model, tiny_ids

FAMILY = "tinyfam"


@pytest.fixture
def tinyfam():
    """A Llama-like family registered from data alone, and a tiny model that says it is one."""
    adapter_cls = register_family(FAMILY, (FAMILY,), LLAMA, gated_mlp=True)
    model = relevance_model("llama")
    model.config.model_type = FAMILY  # what a checkpoint of that family would declare
    try:
        yield adapter_cls, model
    finally:
        ADAPTERS.remove(adapter_cls)


def test_a_registered_family_appears_everywhere(tinyfam):
    from interpscope.graphs.replay import check_architecture
    from interpscope.relevance.engine import attribute
    from interpscope.relevance.rules import cplrp_rules
    from interpscope.relevance.targets import Target

    adapter_cls, model = tinyfam
    adapter = get_adapter(model)
    assert type(adapter) is adapter_cls and family_of(FAMILY) == FAMILY
    reference = LlamaAdapter(model)  # the hand-written family the table entry copies
    assert adapter.capabilities() == reference.capabilities() >= {"transformer_lrp", "linear_replay", "mlp_neurons"}
    assert [m.name for m in methods_for(adapter)] == [m.name for m in methods_for(reference)]
    assert "mambalrp" not in [m.name for m in methods_for(adapter)]
    assert adapter.hook_points() == reference.hook_points()
    for name in adapter.hook_points():
        mine, theirs = adapter.resolve(name), reference.resolve(name)
        assert mine.module is theirs.module and mine.kind == theirs.kind, name
    check_architecture(adapter)  # attribution graphs take it as they take Llama
    ids = tiny_ids()
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    target = Target(ids.shape[1] - 1, int(logits.argmin()))
    result = attribute(adapter, ids, target, cplrp_rules(adapter))
    assert result.conservation is not None and result.conservation.relative_error < 1e-9


def test_a_family_entry_with_an_unknown_fact_is_refused():
    with pytest.raises(ValueError, match="Unknown adapter facts"):
        register_family("typo", ("typo",), LLAMA, gated_mpl=True)
    assert family_of("typo") is None


def test_layouts_name_paths_and_a_family_differs_in_a_few():
    sandwich = LLAMA.but(mlp_norm="pre_feedforward_layernorm", mlp_output_norm="post_feedforward_layernorm")
    assert sandwich.attention == LLAMA.attention and sandwich.mlp_norm != LLAMA.mlp_norm
    assert isinstance(sandwich, Layout)
    model = relevance_model("llama")
    assert at(model, "model.layers.0.self_attn.q_proj") is model.model.layers[0].self_attn.q_proj
    assert at(model, None) is None
