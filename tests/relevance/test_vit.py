"""Vision transformers on tiny random ViT/DeiT folders: the CLI explains an image with AttnLRP/CP-LRP, the books
balance (CP-LRP exactly, AttnLRP with its softmax share), the explained logit is the unpatched model's, the
baselines and patch flipping give their documents, and bad input is refused with exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from interpscope.cli import main
from tests.tiny import png_bytes, sample_image, tiny_vit_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_vit_folder(tmp_path_factory.mktemp("vit") / "tiny-vit")


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "block.png"
    path.write_bytes(png_bytes(sample_image()))
    return path


def unpatched_logits(folder, image: np.ndarray) -> torch.Tensor:
    """The model's logits, loaded straight from the folder by transformers, no rules, no project code but the
    preprocessing."""
    from transformers import AutoModelForImageClassification

    from interpscope.images import model_pixels
    from interpscope.models.vision import Preprocessing

    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    pixels = model_pixels(image, Preprocessing(12, 12, 1, [0.5], [0.5]))
    with torch.no_grad():
        return model(pixel_values=pixels).logits[0]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("method", ["cplrp", "attnlrp"])
def test_cli_explains_a_tiny_vit_folder(folder, image_file, tmp_path, capsys, method):
    out = tmp_path / "map.json"
    code, printed, err = run_cli(capsys, "explain", "--model", str(folder), "--image", str(image_file), "--method",
                                 method, "--json", str(out))
    assert code == 0, err
    document = json.loads(out.read_text())
    assert (document["schema"], document["schema_version"]) == ("interpscope.image_relevance", 1)
    logits = unpatched_logits(folder, sample_image())
    assert document["target_class"] == int(logits.argmax()) == document["predicted_class"]
    assert document["logit"] == pytest.approx(float(logits.max()), abs=1e-6)
    readout = document["conservation"]
    assert readout["relative_error"] <= 1e-3
    explained = readout["input_sum"] + readout["bias_sum"] + readout["softmax_sum"]
    assert explained == pytest.approx(document["logit"], rel=1e-3)
    if method == "cplrp":  # nothing through the softmaxes: the pixels and biases alone carry the logit
        assert abs(readout["softmax_sum"]) < 1e-6 and abs(readout["gap_without_softmax"]) <= 1e-3
    else:  # AttnLRP's books balance only with its softmax share, which is not zero
        assert abs(readout["gap_without_softmax"]) > 1e-4
    pixels, patches = np.array(document["pixel_relevance"]), np.array(document["patch_relevance"])
    assert pixels.shape == (12, 12) and patches.shape == (3, 3) and document["grid"] == [3, 3]
    assert patches.sum() == pytest.approx(pixels.sum(), abs=1e-9) == pytest.approx(readout["input_sum"], abs=1e-6)
    assert patches[0, 1] == pytest.approx(pixels[0:4, 4:8].sum(), abs=1e-9)
    assert "conservation" in printed and "patch relevance" in printed


def test_float64_conservation_and_the_rules_matter(folder):
    from interpscope.images import model_pixels
    from interpscope.models.vision import load_image_model
    from interpscope.relevance.image import rule_attribution
    from interpscope.relevance.image_api import explain_image

    lm = load_image_model(str(folder), dtype="float64")
    image = sample_image()
    for method in ("cplrp", "attnlrp"):
        for target in range(4):  # any class, not only the predicted one
            readout = explain_image(lm, image, method, target_class=target).conservation
            assert readout.relative_error <= 1e-5, (method, target)
            if method == "cplrp":
                assert abs(readout.gap_without_softmax) <= 1e-5
    pixels = model_pixels(image, lm.preprocessing).double()
    plain = rule_attribution(lm.adapter, pixels, 0, [])  # Gradient x Input: no rules, the books do not balance
    assert plain.conservation.relative_error > 1e-3


def test_deit_and_a_chosen_class(tmp_path, image_file, capsys):
    folder = tiny_vit_folder(tmp_path / "tiny-deit", seed=1, kind="deit")
    out = tmp_path / "deit.json"
    code, _, err = run_cli(capsys, "explain", "--model", str(folder), "--image", str(image_file), "--method",
                           "cplrp", "--target-class", "2", "--json", str(out))
    assert code == 0, err
    document = json.loads(out.read_text())
    assert document["target_class"] == 2 and document["target_label"] == "two"
    assert document["logit"] == pytest.approx(float(unpatched_logits(folder, sample_image())[2]), abs=1e-6)
    assert document["conservation"]["relative_error"] <= 1e-3  # the distillation token is booked with the biases
    code, _, err = run_cli(capsys, "explain", "--model", str(folder), "--image", str(image_file), "--target-class",
                           "9")
    assert code == 2 and "out of range" in err and "4 classes" in err


def test_baselines_and_patch_flipping(folder):
    from interpscope.models.vision import load_image_model
    from interpscope.relevance.image import image_methods
    from interpscope.relevance.image_api import explain_image
    from interpscope.relevance.image_faithfulness import patch_flipping

    lm = load_image_model(str(folder))
    image = sample_image()
    maps = [explain_image(lm, image, name) for name in image_methods()]
    by_name = {m.method: m for m in maps}
    ig = by_name["ig"].to_dict()
    assert ig["reference"] == "mean" and ig["completeness"]["relative_gap"] < 0.05
    assert "conservation" not in ig and "reference" not in by_name["attnlrp"].to_dict()
    occlusion = by_name["occlusion"]  # each patch's value: the logit's drop when that patch alone is the mean
    from interpscope.images import model_pixels
    from interpscope.relevance.image import class_logits, patch_masks, reference_input

    pixels = model_pixels(image, lm.preprocessing)
    mask = patch_masks(lm.adapter)[4]
    occluded = torch.where(mask, reference_input(pixels, "mean", lm.preprocessing), pixels)
    drop = occlusion.logit - float(class_logits(lm.adapter, occluded)[0, occlusion.target_class])
    assert float(np.asarray(occlusion.patch_relevance)[1, 1]) == pytest.approx(drop, abs=1e-5)
    flipping = patch_flipping(lm, image, maps, random_orders=4)
    document = flipping.to_dict()
    assert (document["schema"], document["n_patches"], document["counts"]) == \
        ("interpscope.image_faithfulness", 9, list(range(10)))
    assert [c["method"] for c in document["curves"]] == list(image_methods())
    assert all(c["values"][0] == pytest.approx(maps[0].logit, abs=1e-5) for c in document["curves"])
    assert len(document["random"]["aucs"]) == 4 and flipping.reading()
    first = document["curves"][0]["values"]
    assert first[-1] == pytest.approx(float(class_logits(lm.adapter, reference_input(
        pixels, "mean", lm.preprocessing))[0, maps[0].target_class]), abs=1e-5)  # all patches gone: the reference


def test_bad_image_inputs_exit_2(folder, image_file, tmp_path, capsys):
    from PIL import Image

    from tests.tiny import tiny_llama

    text_folder = tmp_path / "tiny-llama"
    tiny_llama().save_pretrained(text_folder)
    not_image = tmp_path / "notes.png"
    not_image.write_text("just words, not pixels")
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as handle:  # over the byte limit: refused from its size, never decoded
        handle.write(b"\x89PNG\r\n\x1a\n")
        handle.truncate(11 * 1024 * 1024)
    bomb = tmp_path / "bomb.png"
    Image.new("L", (5000, 5000)).save(bomb)  # a small file declaring 25 million pixels
    cases = [
        (["--model", str(folder), "--image", str(not_image)], "not a PNG or JPEG"),
        (["--model", str(folder), "--image", str(huge)], "at most 10 MiB"),
        (["--model", str(folder), "--image", str(bomb)], "5000x5000"),
        (["--model", str(folder), "--image", str(tmp_path / "missing.png")], "No such file"),
        (["--model", str(text_folder), "--image", str(image_file)], "text model"),
        (["--model", str(folder), "--text", "a cat"], "image classifier"),
        (["--model", str(folder), "--image", str(image_file), "--method", "mambalrp"], "Unknown method"),
        (["--model", str(folder), "--image", str(image_file), "--contrast", "a", "b"], "go with text"),
    ]
    for argv, message in cases:
        code, _, err = run_cli(capsys, "explain", *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_models_list_says_what_each_model_reads(capsys):
    code, printed, err = run_cli(capsys, "models", "--json")
    assert code == 0, err
    models = {m["name"]: m for m in json.loads(printed)["models"]}
    assert models["smollm2-135m"]["modality"] == "text"
    assert {m["modality"] for m in models.values()} <= {"text", "image"}


def test_a_larger_colour_image_is_resized_and_says_so(folder, tmp_path, capsys):
    big = np.kron(sample_image(2), np.ones((2, 3, 1), dtype=np.uint8))  # 24 x 36 RGB
    path = tmp_path / "big.png"
    path.write_bytes(png_bytes(big))
    out = tmp_path / "big.json"
    code, printed, err = run_cli(capsys, "explain", "--model", str(folder), "--image", str(path), "--method",
                                 "cplrp", "--json", str(out))
    assert code == 0, err
    document = json.loads(out.read_text())
    assert document["source_size"] == [24, 36] and document["image_size"] == [12, 12]
    assert "36x24 image was resized to the model's 12x12" in printed
    assert document["conservation"]["relative_error"] <= 1e-3


def test_cli_patch_flipping_is_the_api_document(folder, image_file, tmp_path, capsys):
    import interpscope
    from interpscope.results import without_timings

    out = tmp_path / "flip.json"
    code, printed, err = run_cli(capsys, "explain", "--model", str(folder), "--image", str(image_file),
                                 "--patch-flipping", "--reference", "black", "--json", str(out))
    assert code == 0, err
    document = json.loads(out.read_text())
    api = interpscope.patch_flipping(interpscope.load_image(str(folder)), str(image_file), reference="black")
    assert without_timings(document) == without_timings(api.to_dict())
    assert document["reference"] == "black" and "random orders" in printed
