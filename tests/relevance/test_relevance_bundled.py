"""The relevance engine on the bundled SmolLM2-135M in float32."""
from __future__ import annotations

import numpy as np
import pytest

from interpscope.config import InterpscopeError
from interpscope.relevance.api import explain, faithfulness, top_heads, top_neurons

pytestmark = pytest.mark.bundled
TEXT = "Mr. Darcy looked at Elizabeth, and Elizabeth looked back at"


def test_cplrp_conserves_on_bundled_model(bundled_lm):
    result = explain(bundled_lm, TEXT, "cplrp")
    conservation = result.conservation
    assert conservation.relative_error < 1e-3
    assert abs(result.relevance.sum() - result.logit) / abs(result.logit) < 1e-3  # SmolLM2 has no biases
    assert result.tokens == ["<|endoftext|>"] + bundled_lm.token_strings(bundled_lm.encode(TEXT)[0])
    assert result.bos_prepended and result.sink_positions[0] == 0 and 1 not in result.sink_positions
    assert result.target.position == len(result.tokens) - 1
    assert result.seconds > 0


def test_attnlrp_on_bundled_model_with_latent_relevance(bundled_lm):
    result = explain(bundled_lm, TEXT, "attnlrp", latent=True)
    conservation = result.conservation
    assert conservation.relative_error < 1e-3
    assert abs(conservation.softmax_sum) > 1e-2 * abs(result.logit)  # the gap AttnLRP leaves at its softmaxes
    latent = result.latent
    adapter = bundled_lm.adapter
    assert latent.residual.shape == (adapter.n_layers + 1, len(result.tokens))
    assert latent.heads.shape == (adapter.n_layers, adapter.n_heads)
    assert latent.neurons.shape == (adapter.n_layers, adapter.d_mlp)
    np.testing.assert_allclose(latent.residual[0].sum(), conservation.input_sum, rtol=1e-4)
    heads = top_heads(latent, 5)
    assert len(heads) == 5 and abs(heads[0]["relevance"]) >= abs(heads[-1]["relevance"])
    assert len(top_neurons(latent, 3)) == 3


def test_contrast_and_faithfulness_on_bundled_model(bundled_lm):
    result = explain(bundled_lm, TEXT, "cplrp", contrast=(" her", " him"))
    assert result.target.token == " her" and result.target.contrast_token == " him"
    curves = faithfulness(bundled_lm, result, steps=5)
    assert curves.morf[0] == pytest.approx(result.logit, rel=1e-3, abs=1e-3)
    assert np.isfinite(curves.abpc)
    with pytest.raises(InterpscopeError, match="tokens"):
        explain(bundled_lm, TEXT, "cplrp", token=" Pemberley Hall")
