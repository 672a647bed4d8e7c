"""Tests for packcli.read.json_array: JSON arrays read element by element, each record located by its
line; a broken array counts as one bad record."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.read import json_array as read_json
from tests.input_files import fail_message, read_all, read_skipping, write_json, write_jsonl


def lines_starting_records(path: Path) -> list[int]:
    """Where `json.dumps(indent=2)` starts each record of the top-level array."""
    text = path.read_text()
    return [i for i, line in enumerate(text.splitlines(), 1) if line == "  {"]


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".json.zst"])
def test_json_array_round_trip_with_the_line_of_each_record(tmp_path, suffix):
    records = [{"text": f"document {i} ✓", "meta": {"n": [i, i]}} for i in range(30)]
    path = write_json(tmp_path / f"data{suffix}", records)
    got = read_all([path], batch_size=7)
    assert [r["text"] for _, r in got] == [r["text"] for r in records]
    plain = write_json(tmp_path / "plain.json", records)
    assert [loc for loc, _ in got] == [f"{path}:{n}" for n in lines_starting_records(plain)]


def test_json_array_on_one_line(tmp_path):
    path = tmp_path / "one.json"
    path.write_bytes(b'\xef\xbb\xbf [{"text": "a"},{"text": "b [x] {y} \\"z\\""} ,\n {"text": "c"}]\n')
    got = read_all([path])
    assert got == [(f"{path}:1", {"text": "a"}), (f"{path}:1", {"text": 'b [x] {y} "z"'}), (f"{path}:2", {"text": "c"})]


def test_json_file_of_json_lines_is_read_as_json_lines(tmp_path):
    path = tmp_path / "lines.json"
    path.write_bytes(b'\n{"text": "a"}\n\n{"text": "b"}\n')
    assert read_all([path]) == [(f"{path}:2", {"text": "a"}), (f"{path}:4", {"text": "b"})]


def test_json_messages_in_sharegpt_shape(tmp_path):
    record = {"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}], "id": "x"}
    path = write_json(tmp_path / "sharegpt.json", [record, record])
    got = read_all([path], {"conversations": "messages"})
    assert [r["conversations"] for _, r in got] == [
        [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    ] * 2


@pytest.mark.parametrize("data", [b"", b"  \n", b"[]", b" [ \n ] \n"])
def test_json_without_records(tmp_path, data):
    path = tmp_path / "empty.json"
    path.write_bytes(data)
    got, bad = read_skipping([path])
    assert got == [] and bad.records_seen == 0


def test_bad_record_in_json_array_is_named_by_its_line(tmp_path):
    path = write_json(tmp_path / "data.json", [{"text": "a"}, {"question": "q"}, {"text": ""}, {"text": "d"}])
    assert fail_message([path]) == f"{path}:5: missing field 'text' (fields present: 'question')"
    got, bad = read_skipping([path])
    assert [loc for loc, _ in got] == [f"{path}:2", f"{path}:11"]
    assert bad.counts == {"missing field": 1, "empty text": 1} and bad.records_seen == 4
    assert bad.examples == [
        f"{path}:5: missing field 'text' (fields present: 'question')",
        f"{path}:8: field 'text' is empty",
    ]


def test_malformed_record_with_balanced_brackets_is_one_bad_record(tmp_path):
    path = tmp_path / "data.json"
    path.write_bytes(b'[\n  {"text": "a"},\n  {"text": "b",\n   "x": 1,}, \n  {"text": "c"}\n]\n')
    message = fail_message([path])
    assert (
        message == f"{path}:3: malformed JSON (Expecting property name enclosed in double quotes at line 4 column 11)"
    )
    got, bad = read_skipping([path])
    assert [loc for loc, _ in got] == [f"{path}:2", f"{path}:5"] and bad.counts == {"malformed JSON": 1}


def test_invalid_utf8_in_json_array_record(tmp_path):
    path = tmp_path / "data.json"
    path.write_bytes(b'[{"text": "a"},\n  {"text": "caf\xe9"}]')
    assert fail_message([path]) == f"{path}:2: invalid UTF-8 (byte 0xe9 at column 16)"


def test_records_that_are_not_objects(tmp_path):
    path = tmp_path / "data.json"
    path.write_bytes(b'[1, "a", null, [2], {"text": "x"}, true]')
    got, bad = read_skipping([path])
    assert got == [(f"{path}:1", {"text": "x"})]
    assert bad.counts == {"not an object": 5} and bad.records_seen == 6


BROKEN_ARRAYS = [
    pytest.param(b'[{"text": "a"}\n {"text": "b"}]', 2, "expected ',' or ']' after a record, found '{'", id="no-comma"),
    pytest.param(b'[{"text": "a"},\n]', 2, "a ',' before the closing ']'", id="trailing-comma"),
    pytest.param(b'[{"text": "a"},\n {"text": "b"', 2, "the file ends inside a record", id="cut-record"),
    pytest.param(b'[{"text": "a"},\n {"text": "b', 2, "a string that never ends", id="cut-string"),
    pytest.param(
        b'[{"text": "a"},\n {"text": "b"}',
        2,
        "expected ',' or ']' after a record, found the end of the file",
        id="no-closing",
    ),
    pytest.param(b'[{"text": "a"},', 1, "the file ends inside the array", id="ends-after-comma"),
    pytest.param(b'[{"text": "a"},\n {"text": ["b"}]', 2, "'}' does not close the bracket before it", id="mismatch"),
    pytest.param(b'[{"text": "a"}]\n\n{"text": "b"}', 3, "'{' after the closing ']'", id="after-array"),
    pytest.param(b'[{"text": "a"}, , {"text": "b"}]', 1, "expected a record, found ','", id="empty-element"),
]


@pytest.mark.parametrize("data,line,problem", BROKEN_ARRAYS)
def test_broken_json_array_fails_at_the_line_of_the_break(tmp_path, data, line, problem):
    path = tmp_path / "broken.json"
    path.write_bytes(data)
    assert fail_message([path]) == f"{path}:{line}: malformed JSON array ({problem})"


@pytest.mark.parametrize("data,line,problem", BROKEN_ARRAYS)
def test_broken_json_array_counts_once_under_skip_and_reading_goes_on(tmp_path, data, line, problem):
    path = tmp_path / "broken.json"
    path.write_bytes(data)
    after = write_jsonl(tmp_path / "after.jsonl", [{"text": "next file"}])
    got, bad = read_skipping([path, after])
    assert got[0] == (f"{path}:1", {"text": "a"}) and got[-1] == (f"{after}:1", {"text": "next file"})
    assert bad.counts == {"malformed JSON": 1}
    assert bad.examples == [f"{path}:{line}: malformed JSON array ({problem})"]
    assert bad.records_seen == len(got) + 1


def test_truncated_json_gz_counts_once(tmp_path):
    records = [{"text": f"record {i} " + "x" * (i % 50)} for i in range(3000)]
    path = tmp_path / "cut.json.gz"
    data = gzip.compress(json.dumps(records, indent=1).encode())
    path.write_bytes(data[: len(data) // 2])
    got, bad = read_skipping([path])
    assert 0 < len(got) < 3000 and bad.counts == {"truncated stream": 1}
    assert bad.examples[0].startswith(f"{path}:") and bad.examples[0].endswith("truncated gzip stream")


json_records = st.lists(
    st.fixed_dictionaries(
        {"text": st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)},
        optional={
            "n": st.lists(st.integers(-5, 5) | st.none(), max_size=4),
            "o": st.dictionaries(st.text(max_size=3), st.text('[]{}"\\,: ab', max_size=6), max_size=3),
        },
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=json_records, indent=st.sampled_from([None, 0, 1, 4]), chunk=st.integers(1, 40), ensure_ascii=st.booleans()
)
def test_json_array_read_in_small_chunks_equals_json_loads(tmp_path, monkeypatch, records, indent, chunk, ensure_ascii):
    """Chunk boundaries fall anywhere: inside strings, escapes, numbers, between records."""
    monkeypatch.setattr(read_json, "READ_CHUNK", chunk)
    text = json.dumps(records, indent=indent, ensure_ascii=ensure_ascii)
    path = tmp_path / "small.json"
    path.write_text(text, encoding="utf-8")
    got = read_all([path], {"text": "text"}, batch_size=3)
    assert [r["text"] for _, r in got] == [r["text"] for r in records]
    decoder, starts, pos = json.JSONDecoder(), [], text.index("[") + 1
    for _ in records:  # where each record starts, found by the stdlib
        while text[pos] in " \n,":
            pos += 1
        starts.append(text.count("\n", 0, pos) + 1)
        pos = decoder.raw_decode(text, pos)[1]
    assert [loc for loc, _ in got] == [f"{path}:{n}" for n in starts]
