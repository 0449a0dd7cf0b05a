"""Relevance methods are one registry: every list of methods (text, images, encoder-decoders, experts, the gradient
tolerance, the command line's choices, the page) is derived from what a method declares, so a method registered
in a test appears everywhere it applies with no other edit, and no module keeps a side list of method names."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.relevance.methods import METHODS, get_method, method_names, methods_for, methods_serving
from tests.tiny import relevance_model, tiny_ids

ROOT = Path(__file__).resolve().parents[2]
TWIN = "twinlrp"


def side_lists(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """Literal collections naming two or more methods, and comparisons with a method's name, in Python source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        elements: list[ast.expr] = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Compare):
            elements = [node.left, *node.comparators]
        named = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in names]
        if len(named) >= 2 or (isinstance(node, ast.Compare) and named):
            found.append((node.lineno, named))
    return found


def test_the_side_list_finder_sees_planted_lists():
    names = {"attnlrp", "ig", "gradxinput"}
    assert side_lists('GRADIENT = ("gradxinput", "ig")', names) == [(1, ["gradxinput", "ig"])]
    assert side_lists('RULES = {"attnlrp": 1, "other": 2, "ig": 3}', names) == [(1, ["attnlrp", "ig"])]
    assert side_lists('if name == "ig":\n    pass', names) == [(1, ["ig"])]
    assert side_lists('LABEL = "attnlrp"\nx = ("attnlrp", "other")', names) == []


def test_no_module_keeps_a_side_list_of_method_names():
    """Outside the registrations (interpscope.relevance.builtin), no literal list, tuple, set or dict of method names
    and no comparison with one: pages, commands and the library ask the registry by what a method declares."""
    names = set(METHODS)
    offenders = []
    for folder in ("backend/interpscope", "pages", "components"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "backend/interpscope/relevance/builtin.py":
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}: {named}"
                          for line, named in side_lists(path.read_text(encoding="utf-8"), names)]
    assert offenders == []


def test_every_input_kind_has_its_methods_in_registration_order():
    order = list(METHODS)
    for kind in ("text", "image", "seq2seq", "experts"):
        served = [m.name for m in methods_serving(kind)]
        assert served and served == sorted(served, key=order.index)
    assert [m.name for m in methods_serving("experts")] == [m.name for m in METHODS.values() if m.rules is not None
                                                             and "experts" in m.inputs]
    with pytest.raises(ValueError, match="Unknown input kind"):
        methods_serving("audio")


def test_a_registration_that_contradicts_itself_is_refused():
    from interpscope.relevance.methods import register_method

    cplrp = METHODS["cplrp"]
    for bad, message in ((dataclasses.replace(cplrp, name="bad", image=None), "serves images exactly"),
                         (dataclasses.replace(cplrp, name="bad", inputs=frozenset({"text", "audio"})), "inputs are"),
                         (dataclasses.replace(METHODS["ig"], name="bad", inputs=frozenset({"experts"}), image=None),
                          "per-expert relevance runs LRP rules")):
        with pytest.raises(ValueError, match=message):
            register_method(bad)
        assert "bad" not in METHODS


@pytest.fixture
def twin():
    """CP-LRP registered again under another name, as a user's own method would be: one registration, no other
    edit anywhere."""
    from interpscope.relevance.methods import register_method

    method = register_method(dataclasses.replace(METHODS["cplrp"], name=TWIN, label="Twin LRP"))
    try:
        yield method
    finally:
        METHODS.pop(TWIN)


def test_a_registered_method_runs_on_text_and_is_offered_by_the_command_line(twin):
    from interpscope.cli import build_parser
    from interpscope.relevance.api import run_method
    from interpscope.relevance.targets import Target

    model = relevance_model("llama")
    adapter = get_adapter(model)
    assert TWIN in [m.name for m in methods_for(adapter)] and get_method(TWIN, adapter) is twin
    ids = tiny_ids()
    target = Target(ids.shape[1] - 1, 5)
    mine, _ = run_method(model, ids, TWIN, target)
    reference, _ = run_method(model, ids, "cplrp", target)
    np.testing.assert_array_equal(mine.relevance, reference.relevance)
    assert TWIN in method_names()
    for command in ("relevance", "explain"):  # the command and its old name
        args = build_parser().parse_args([command, "--text", "hi", "--method", TWIN])
        assert args.method == TWIN


def test_a_registered_method_serves_images_encoder_decoders_and_experts(twin):
    from interpscope.adapters.vit import ViTAdapter
    from interpscope.relevance.experts import expert_methods
    from interpscope.relevance.image import attribute_pixels, image_methods
    from interpscope.relevance.seq2seq import seq2seq_methods
    from interpscope.scale.tolerance import relevance_tolerance
    from tests.tiny import tiny_vit

    assert seq2seq_methods()[TWIN] == "Twin LRP"
    assert expert_methods()[TWIN] is twin
    assert relevance_tolerance(torch.bfloat16, TWIN) == relevance_tolerance(torch.bfloat16, "cplrp")
    assert relevance_tolerance(torch.bfloat16, "gradxinput") > relevance_tolerance(torch.bfloat16, TWIN)
    assert image_methods()[TWIN].label == "Twin LRP"
    vit = tiny_vit().double()
    adapter = ViTAdapter(vit)
    pixels = torch.randn(1, 1, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    mine = attribute_pixels(adapter, pixels, 1, TWIN, preprocessing=None)
    reference = attribute_pixels(adapter, pixels, 1, "cplrp", preprocessing=None)
    np.testing.assert_array_equal(mine.relevance, reference.relevance)
    assert mine.conservation is not None and mine.conservation.relative_error < 1e-9


@pytest.mark.bundled
def test_a_registered_method_is_offered_by_the_relevance_page(twin, bundled_lm):
    from tests.apptest_util import open_page

    at = open_page("pages/relevance.py")
    assert not at.exception, at.exception
    method = at.selectbox(key="relevance-method")
    assert TWIN in method.options or "Twin LRP" in method.options
