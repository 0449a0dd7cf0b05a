"""Input checks: empty, binary, wrong encoding, oversized, and the upload formats."""
from __future__ import annotations

import codecs
import json

import pytest

from interpscope.config import InterpscopeError
from interpscope.inputs import MAX_UPLOAD_BYTES, check_text, check_token_count, decode_bytes
from interpscope.uploads import parse_examples


@pytest.mark.parametrize("text", [None, "", "  \n\t"])
def test_empty_text(text):
    with pytest.raises(InterpscopeError, match="empty"):
        check_text(text)


def test_binary_text():
    with pytest.raises(InterpscopeError, match="binary"):
        check_text("abc\x00def")
    with pytest.raises(InterpscopeError, match="control characters"):
        check_text("\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f" * 3)


def test_good_text_passes_unchanged():
    text = "Emma Woodhouse, handsome, clever, and rich — naïve? 😊\n\tNo."
    assert check_text(text) == text


def test_decode_utf8_with_and_without_bom_and_utf16():
    assert decode_bytes("héllo".encode()) == "héllo"
    assert decode_bytes(codecs.BOM_UTF8 + "héllo".encode()) == "héllo"
    assert decode_bytes("héllo".encode("utf-16")) == "héllo"


def test_decode_refuses_latin1_binary_empty_and_huge():
    with pytest.raises(InterpscopeError, match="not valid UTF-8"):
        decode_bytes("café".encode("latin-1"), "notes.txt")
    with pytest.raises(InterpscopeError, match="binary"):
        decode_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.txt")
    with pytest.raises(InterpscopeError, match="empty"):
        decode_bytes(b"", "empty.txt")
    with pytest.raises(InterpscopeError, match="the limit is 20 MiB"):
        decode_bytes(b"a" * (MAX_UPLOAD_BYTES + 1), "big.txt")


def test_token_count_limits():
    check_token_count(10, 10)
    with pytest.raises(InterpscopeError, match="11 tokens long; the limit here is 10"):
        check_token_count(11, 10)
    with pytest.raises(InterpscopeError, match="no tokens"):
        check_token_count(0, 10)


def test_parse_examples_per_format():
    assert parse_examples(b"first line\n\nsecond line\n", "a.txt") == ["first line", "second line"]
    assert parse_examples(b"# Title\nbody", "a.md") == ["# Title", "body"]
    csv = b'id,text,label\n1,"Hello, world",x\n2,Second,y\n'
    assert parse_examples(csv, "a.csv") == ["Hello, world", "Second"]
    assert parse_examples(b"id,body\n1,alpha\n2,beta\n", "b.csv") == ["alpha", "beta"]
    jsonl = "\n".join(json.dumps({"text": t, "n": i}) for i, t in enumerate(["one", "two"])).encode()
    assert parse_examples(jsonl, "a.jsonl") == ["one", "two"]


def test_parse_examples_errors():
    with pytest.raises(InterpscopeError, match="line 2 is not valid JSON"):
        parse_examples(b'{"text": "a"}\n{oops\n', "a.jsonl")
    with pytest.raises(InterpscopeError, match='no string field "text"'):
        parse_examples(b'{"body": "a"}\n', "a.jsonl")
    with pytest.raises(InterpscopeError, match="no text column"):
        parse_examples(b"a,b\n1,2\n", "nums.csv")
    with pytest.raises(InterpscopeError, match="unsupported file type"):
        parse_examples(b"x", "model.pt")
    with pytest.raises(InterpscopeError, match="empty"):
        parse_examples(b"\n\n  \n", "blank.txt")


def test_upload_tables_say_which_columns_they_used_and_what_they_left_out():
    from interpscope.uploads import parse_table

    table = parse_table(b"id,body,label\n1,alpha,pos\n2,,neg\n3,gamma,neg\n", "b.csv")
    assert table.examples == ["alpha", "gamma"] and table.labels == ["pos", "neg"]
    assert table.text_column == "body" and table.label_column == "label"
    assert "No column named 'text'" in table.note and "'body'" in table.note and "1 row(s)" in table.note
    named = parse_table(b"text,class\nhello,a\n", "c.csv")
    assert named.note == "Label column: 'class'." and named.labels == ["a"]
    lines = parse_table(b'{"text": "x", "label": 1}\n{"text": "y", "label": 0}\n', "d.jsonl")
    assert lines.labels == ["1", "0"] and lines.label_column == "label"
    assert parse_table(b'{"text": "x"}\n{"text": "y", "label": 0}\n', "e.jsonl").labels is None
    with pytest.raises(InterpscopeError, match="no column 'nope'"):
        parse_table(b"text\nhi\n", "f.csv", text_column="nope")
