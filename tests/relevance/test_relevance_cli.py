"""`interpscope explain`: JSON fields, file inputs, images, and one-line errors with exit status 2."""
from __future__ import annotations

import json

import pytest

from interpscope.cli import main

pytestmark = pytest.mark.bundled
TEXT = "Elizabeth Bennet walked to the"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("method", ["attnlrp", "cplrp", "gradxinput", "ig", "occlusion"])
def test_explain_json_fields(capsys, tmp_path, bundled_lm, method):
    out = tmp_path / "result.json"
    code, stdout, _ = run_cli(capsys, "explain", "--text", TEXT, "--method", method, "--json", str(out))
    assert code == 0
    data = json.loads(out.read_text())
    assert data["model"] == "smollm2-135m" and data["method"] == method
    words = bundled_lm.token_strings(bundled_lm.encode(TEXT)[0])
    prefix = bundled_lm.tokenizer.convert_ids_to_tokens(bundled_lm.prefix_token_id)  # the model's measured prefix
    assert data["bos_prepended"] is True and data["tokens"] == [prefix] + words
    assert data["sink_positions"][0] == 0 and data["sinks"][0]["prepended"] and 1 not in data["sink_positions"]
    assert len(data["relevance"]) == len(data["tokens"]) and all(isinstance(v, float) for v in data["relevance"])
    assert set(data["target"]) >= {"token", "token_id", "position", "label", "kind"}
    assert data["target"]["position"] == len(data["tokens"]) - 1 and data["target"]["kind"] == "logit"
    assert isinstance(data["logit"], float) and data["seconds"] > 0
    assert data["schema"] == "interpscope.relevance" and data["schema_version"] == 2
    assert ("settings" in data) == (method in ("ig", "occlusion"))  # only methods that take options
    conservation = data.get("conservation")
    if method in ("attnlrp", "cplrp"):
        assert {"input_sum", "softmax_sum", "relative_error"} <= set(conservation)
        assert "bias_sum" not in conservation  # SmolLM2 has no bias to absorb relevance: absent, not 0
        assert conservation["relative_error"] < 1e-3
        assert abs(conservation["input_sum"] + conservation["softmax_sum"]
                   - data["logit"]) < 1e-3 * abs(data["logit"])
    else:
        assert conservation is None  # a method without a conservation law: the key is absent
    if method == "ig":  # completeness: relevance sums to f(x) - f(baseline), up to the integral's gap
        completeness = data["completeness"]
        assert abs(sum(data["relevance"]) - completeness["relevance_sum"]) < 1e-6
        assert abs(completeness["gap"] - (completeness["relevance_sum"] - completeness["value"]
                                          + completeness["baseline_value"])) < 1e-6
    assert data["target"]["token"] in stdout  # the human summary is printed too


def test_without_the_prepended_bos_smollm2s_first_word_is_measured_as_the_sink(capsys, bundled_lm):
    code, stdout, _ = run_cli(capsys, "explain", "--text", TEXT, "--method", "gradxinput", "--no-prepend-bos",
                              "--json", "-")
    assert code == 0
    data = json.loads(stdout)
    assert data["bos_prepended"] is False and data["tokens"][0] == "Elizabeth"
    first = data["sinks"][0]
    assert first["position"] == 0 and not first["prepended"] and first["ratio"] > 10  # measured, not assumed
    assert first["reason"] == f"measured attention sink, {first['ratio']:.0f}x the median norm"


def test_explain_json_to_stdout_with_contrast_and_png(capsys, tmp_path, bundled_lm):
    image = tmp_path / "map.png"
    code, stdout, _ = run_cli(capsys, "explain", "--text", TEXT, "--method", "cplrp", "--contrast", " other", " same",
                              "--json", "-", "--png", str(image))
    assert code == 0
    data = json.loads(stdout)
    assert data["target"]["token"] == " other" and data["target"]["contrast_token"] == " same"
    assert data["target"]["kind"] == "logit difference" and data["target"]["label"] == "' other' rather than ' same'"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 5000


def test_explain_file_rows(capsys, tmp_path, bundled_lm):
    table = tmp_path / "examples.csv"
    table.write_text('id,text\n1,"The sun rose over"\n2,"Mr. Darcy bowed to"\n', encoding="utf-8")
    code, stdout, _ = run_cli(capsys, "explain", "--file", str(table), "--row", "1", "--method", "gradxinput",
                              "--no-prepend-bos", "--json", "-")
    assert code == 0
    assert "".join(json.loads(stdout)["tokens"]) == "Mr. Darcy bowed to"
    lines = tmp_path / "examples.jsonl"
    lines.write_text('{"text": "one two three"}\n{"text": "She smiled at"}\n', encoding="utf-8")
    code, stdout, _ = run_cli(capsys, "explain", "--file", str(lines), "--row", "1", "--target-token", " him",
                              "--json", "-")
    assert code == 0 and json.loads(stdout)["target"]["token"] == " him"


@pytest.mark.parametrize("argv, message", [
    (["--text", "   "], "empty"),
    (["--file", "/nonexistent/x.txt"], "No such file"),
    (["--text", TEXT, "--target-token", " Pemberley Hall"], "tokens"),
    (["--text", TEXT, "--png", "out.gif"], ".png, .svg or .pdf"),
    (["--text", TEXT, "--row", "2"], "--row goes with --file"),
    (["--text", TEXT, "--compare"], "--compare goes with --faithfulness"),
    (["--text", TEXT, "--ig-convergence", "--faithfulness"], "takes no --faithfulness"),
    (["--sample", "3"], "--sample goes with --faithfulness"),
    (["--sample", "3", "--faithfulness", "--target-token", " the"], "takes no --target-token"),
    (["--text", TEXT, "--faithfulness", "--compare", "--methods", "lime"], "does not serve lime"),
])
def test_explain_bad_input(capsys, bundled_lm, argv, message):
    code, stdout, stderr = run_cli(capsys, "explain", *argv)
    assert code == 2
    assert message in stderr and stderr.startswith("interpscope: error:") and len(stderr.strip().splitlines()) == 1


def test_explain_bad_files(capsys, tmp_path, bundled_lm):
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01\x02binary")
    code, _, stderr = run_cli(capsys, "explain", "--file", str(binary))
    assert code == 2 and "binary" in stderr
    table = tmp_path / "t.csv"
    table.write_text("text\nhello there\n", encoding="utf-8")
    code, _, stderr = run_cli(capsys, "explain", "--file", str(table), "--row", "5")
    assert code == 2 and "out of range" in stderr


def test_a_batch_over_the_pages_cap_is_refused_not_cut(capsys, tmp_path):
    many = tmp_path / "many.txt"
    many.write_text("".join(f"line {i} of the file\n" for i in range(201)), encoding="utf-8")
    code, _, stderr = run_cli(capsys, "explain", "--file", str(many), "--all-rows", "--faithfulness")
    assert code == 2 and "at most 200 texts" in stderr and "201" in stderr


def test_unknown_method_is_a_usage_error(capsys):
    code, _, stderr = run_cli(capsys, "explain", "--text", "hi", "--method", "lime")
    assert code == 2 and "invalid choice" in stderr
