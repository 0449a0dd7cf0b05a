"""KV-cached greedy generation under position-aware edits equals the uncached recomputation, token for token.

The uncached reference recomputes the whole sequence at every step with the edit applied to every position from
1 on; the cached generator runs one token per step. Both must give the same tokens and prompt logits, clean and
edited (the edit on one row of a batch of two only), and the edit must never touch position 0.
"""
from __future__ import annotations

import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.capture import hooks
from interpscope.generation import RowEdit, greedy_generate, greedy_uncached
from tests.tiny import tiny_gemma3, tiny_gpt2, tiny_llama, tiny_mamba

FACTORIES = {"llama": tiny_llama, "gpt2": lambda: tiny_gpt2(vocab=128), "gemma3": tiny_gemma3}


def _push(direction: torch.Tensor):
    return lambda x: x + direction.to(x.dtype)


@pytest.mark.parametrize("family", sorted(FACTORIES))
def test_cached_generation_equals_uncached_clean_and_edited(family):
    model = FACTORIES[family]()
    adapter = get_adapter(model)
    torch.manual_seed(1)
    ids = torch.randint(3, 120, (1, 9)).repeat(2, 1)
    direction = 4.0 * torch.randn(adapter.d_model)
    edit = RowEdit("blocks.0.hook_resid_post", _push(direction), rows=[1], start=1)
    n_new = 12  # past gemma's sliding window of 8
    cached = greedy_generate(adapter, ids, n_new, [edit], prompt_logits=True)
    reference = greedy_uncached(adapter, ids, n_new, [edit], prompt_logits=True)
    assert cached.tokens.tolist() == reference.tokens.tolist()
    torch.testing.assert_close(cached.prompt_logits, reference.prompt_logits, rtol=1e-5, atol=1e-5)
    assert cached.tokens[0].tolist() != cached.tokens[1].tolist(), "the edit changed nothing: the test is void"
    alone = greedy_generate(adapter, ids[:1], n_new)
    assert alone.tokens[0].tolist() == cached.tokens[0].tolist(), "the clean row must not see the edit"
    apart = greedy_generate(adapter, ids, n_new, [edit], prompt_logits=True, prefill_rows_apart=True)
    assert apart.tokens.tolist() == reference.tokens.tolist()
    def shift(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:, :1], x[:, 1:] + direction], 1)

    with torch.no_grad(), hooks(adapter, {"blocks.0.hook_resid_post": shift}):
        edited_alone = model(input_ids=ids[1:]).logits
    with torch.no_grad():
        clean_alone = model(input_ids=ids[:1]).logits
    assert torch.equal(apart.prompt_logits[0], clean_alone[0]) and torch.equal(apart.prompt_logits[1], edited_alone[0])


def test_edit_acts_from_position_1_on_every_generated_position_never_position_0():
    model = tiny_llama()
    adapter = get_adapter(model)
    ids = torch.randint(3, 120, (1, 6))
    seen: list[tuple[int, ...]] = []

    def spy(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape[:2]))
        return x

    greedy_generate(adapter, ids, 4, [RowEdit("blocks.1.hook_resid_post", spy)])
    # prefill: positions 1..5 of the prompt; then one new position per step (positions 6, 7, 8)
    assert seen == [(1, 5), (1, 1), (1, 1), (1, 1)]

    direction = 3.0 * torch.randn(adapter.d_model)
    manual: dict[str, torch.Tensor] = {}

    def by_hand(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[:, 1:] += direction
        return out

    run = greedy_generate(adapter, ids, 5, [RowEdit("blocks.0.hook_resid_post", _push(direction))])
    sequence = ids
    with torch.no_grad(), hooks(adapter, {"blocks.0.hook_resid_post": by_hand}):
        for _ in range(5):
            manual["logits"] = model(input_ids=sequence, use_cache=False).logits[:, -1]
            sequence = torch.cat([sequence, manual["logits"].argmax(-1)[:, None]], 1)
    assert run.tokens.tolist() == sequence[:, ids.shape[1]:].tolist()


def test_models_without_a_key_value_cache_generate_uncached():
    model = tiny_mamba()
    adapter = get_adapter(model)
    ids = torch.randint(3, 120, (1, 7))
    cached = greedy_generate(adapter, ids, 5)
    sequence = ids
    with torch.no_grad():
        for _ in range(5):
            sequence = torch.cat([sequence, model(input_ids=sequence).logits[:, -1].argmax(-1)[:, None]], 1)
    assert cached.tokens.tolist() == sequence[:, 7:].tolist()


def test_zero_new_tokens_gives_the_prompt_logits_only():
    model = tiny_llama()
    adapter = get_adapter(model)
    ids = torch.randint(3, 120, (2, 5))
    run = greedy_generate(adapter, ids, 0, prompt_logits=True)
    assert run.tokens.shape == (2, 0)
    with torch.no_grad():
        torch.testing.assert_close(run.prompt_logits, model(input_ids=ids).logits)
