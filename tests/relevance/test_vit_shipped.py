"""The shipped ViT (vit-fashion-mnist, trained by scripts/train_vit.py): listed as an image model, accurate on its
shipped held-out examples (computed here, checked loosely against its manifest), its maps pass patch flipping
against random orders, and one relevance document comes out of the CLI, the page's export and the API."""
from __future__ import annotations

import numpy as np
import pytest

import interpscope
from interpscope.images import decode_image, model_pixels
from interpscope.models.vision import bundled_examples, load_image_model
from interpscope.relevance.image import class_logits
from interpscope.results import without_timings
from tests.apptest_util import open_page
from tests.project.test_result_documents import cli_document

SHIPPED = "vit-fashion-mnist"


@pytest.fixture(scope="module")
def lm():
    return load_image_model(SHIPPED)


@pytest.fixture(scope="module")
def examples(lm):
    found = bundled_examples(lm)
    return [(e, decode_image(e.path.read_bytes(), e.name)) for e in found]


def test_listed_as_an_image_model(capsys):
    document = cli_document(capsys, "models", "--json")
    entry = next(m for m in document["models"] if m["name"] == SHIPPED)
    assert (entry["modality"], entry["family"], entry["source"]) == ("image", "vit", "bundled")
    assert {m["modality"] for m in document["models"] if m["name"] != SHIPPED} == {"text"}


def test_held_out_accuracy_on_the_shipped_examples(lm, examples):
    assert len(examples) >= 20 and {e.label for e, _ in examples} == set(range(10))
    assert all(e.name.startswith("test") for e, _ in examples)  # held-out: from the 10,000 test images
    import torch

    pixels = torch.cat([model_pixels(image, lm.preprocessing) for _, image in examples])
    predicted = class_logits(lm.adapter, pixels).argmax(-1).numpy()
    accuracy = float(np.mean(predicted == np.array([e.label for e, _ in examples])))
    manifest = lm.meta["held_out_accuracy"]
    assert accuracy >= 0.75 and abs(accuracy - manifest) <= 0.15, (accuracy, manifest)
    assert lm.meta["modality"] == "image" and "train_vit.py" in lm.meta["rebuild"]
    assert lm.meta["data"]["test_images"] == 10000 and "dataset-fashion-mnist" in lm.meta["data"]["source"]


def test_most_relevant_patches_first_drop_the_logit_faster_than_random(lm, examples):
    from interpscope.relevance.image_api import explain_image
    from interpscope.relevance.image_faithfulness import patch_flipping

    firsts = {}
    for example, image in examples:
        firsts.setdefault(example.label, image)
    ahead, gaps = 0, []
    for image in firsts.values():
        flipping = patch_flipping(lm, image, [explain_image(lm, image, "attnlrp")], random_orders=6)
        auc = flipping.curves[0].auc
        ahead += auc < flipping.random.auc_mean
        gaps.append(flipping.random.auc_mean - auc)
    assert ahead >= 8 and float(np.mean(gaps)) > 0, gaps


def test_cplrp_conserves_and_explains_the_models_own_logit(lm, examples):
    from interpscope.relevance.image_api import explain_image

    _, image = examples[0]
    pixels = model_pixels(image, lm.preprocessing)
    logits = class_logits(lm.adapter, pixels)[0]
    for target in (None, 3):
        result = explain_image(lm, image, "cplrp", target_class=target)
        expected = float(logits[result.target_class])
        assert result.logit == pytest.approx(expected, abs=1e-5)
        assert result.conservation.relative_error <= 1e-3


def test_one_document_from_cli_page_and_api(capsys, exports, lm, examples):
    example, image = examples[0]
    cli = cli_document(capsys, "explain", "--model", SHIPPED, "--image", str(example.path), "--method", "attnlrp",
                       "--json", "-")
    api = interpscope.explain_image(interpscope.load_image(SHIPPED), str(example.path), "attnlrp").to_dict()
    at = open_page("pages/relevance.py", model_choice=SHIPPED)
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="relevance-image-run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert without_timings(cli) == without_timings(api) == without_timings(exports["image-map"])
    assert cli["schema"] == "interpscope.image_relevance" and cli["image_sha256"]
    flipping = interpscope.patch_flipping(lm, image).to_dict()
    assert without_timings(flipping) == without_timings(exports["image-flipping"])
    sentences = [m.value for m in at.markdown]
    assert any("logit" in s and "relative error" in s for s in sentences)  # the conservation readout, computed
    assert any("AUC" in s and "random orders" in s for s in sentences)  # the flipping reading, beside its control
