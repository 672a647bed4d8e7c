"""Tests for packcli.read.jsonl: JSON Lines (plain, gzip, zstd, stdin) round-trip, and every bad
record or broken stream is named precisely."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.read.batches import read_batches
from packcli.read.records import BadRecords
from tests.input_files import (
    JSONL_SUFFIXES,
    TEXT,
    compress,
    fail_message,
    read_all,
    read_skipping,
    stdin_feeder,
    write_jsonl,
)


@pytest.fixture
def stdin(monkeypatch):
    """Feeds bytes to sys.stdin: `stdin(b"...")`."""
    return stdin_feeder(monkeypatch)


@pytest.mark.parametrize("suffix", JSONL_SUFFIXES)
def test_jsonl_round_trip(tmp_path, suffix):
    texts = [f"document {i} — ünïcode ✓" for i in range(50)]
    path = write_jsonl(tmp_path / f"data{suffix}", [{"text": t, "id": i} for i, t in enumerate(texts)])
    got = read_all([path])
    assert [r["text"] for _, r in got] == texts
    assert got[0][0] == f"{path}:1" and got[-1][0] == f"{path}:50"


def test_stdin_round_trip(stdin):
    stdin(b'{"text": "one"}\n{"text": "two"}')  # no final newline
    got = read_all(["-"])
    assert got == [("<stdin>:1", {"text": "one"}), ("<stdin>:2", {"text": "two"})]


def test_stdin_is_streamed_not_slurped(stdin):
    fake = stdin(b"".join(b'{"text": "x%d"}\n' % i for i in range(10_000)))
    batches = read_batches(["-"], TEXT, batch_size=10)
    first = next(batches)
    assert len(first) == 10
    assert fake.buffer.tell() < len(fake.buffer.getvalue()) // 10


@pytest.mark.parametrize("suffix", JSONL_SUFFIXES)
def test_jsonl_ids_messages_any(tmp_path, suffix):
    record = {
        "ids": [1, 2, 2**40],
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "name": "bot"}],
        "meta": {"a": [1, 2]},
    }
    path = write_jsonl(tmp_path / f"chat{suffix}", [record])
    fields = {"ids": "ids", "messages": "messages", "meta": "any"}
    [(_, got)] = read_all([path], fields)
    assert isinstance(got["ids"], np.ndarray) and got["ids"].dtype == np.int64
    assert got["ids"].tolist() == [1, 2, 2**40]
    assert got["messages"] == record["messages"]
    assert got["meta"] == {"a": [1, 2]}


def test_blank_lines_are_skipped_silently_and_lines_keep_their_numbers(tmp_path):
    path = write_jsonl(tmp_path / "gaps.jsonl", ["", {"text": "a"}, "   \t", "\r", {"text": "b"}])
    got, bad = read_skipping([path])
    assert got == [(f"{path}:2", {"text": "a"}), (f"{path}:5", {"text": "b"})]
    assert bad.total == 0 and bad.records_seen == 2


def test_windows_line_endings_and_bom(tmp_path):
    path = tmp_path / "win.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a"}\r\n{"text": "b"}\r\n')
    assert [r["text"] for _, r in read_all([path])] == ["a", "b"]


def test_concatenated_gzip_members_are_read_as_one_file(tmp_path):
    path = tmp_path / "joined.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a"}\n') + gzip.compress(b'{"text": "b"}\n'))
    assert read_all([path]) == [(f"{path}:1", {"text": "a"}), (f"{path}:2", {"text": "b"})]


BAD_JSONL = [
    pytest.param(
        b'{"text": "a",}',
        TEXT,
        "malformed JSON",
        "malformed JSON (Expecting property name enclosed in double quotes at column 14)",
        id="malformed",
    ),
    pytest.param(b'{"text": "unterminated', TEXT, "malformed JSON", "malformed JSON (Unterminated string", id="unterm"),
    pytest.param(b"[1, 2]", TEXT, "not an object", "record is a list, expected a JSON object", id="list-record"),
    pytest.param(b'"just text"', TEXT, "not an object", "record is a string, expected a JSON object", id="str-record"),
    pytest.param(b"null", TEXT, "not an object", "record is null, expected a JSON object", id="null-record"),
    pytest.param(
        b'{"question": "q", "answer": "a"}',
        TEXT,
        "missing field",
        "missing field 'text' (fields present: 'question', 'answer')",
        id="missing",
    ),
    pytest.param(b"{}", TEXT, "missing field", "missing field 'text' (fields present: none)", id="missing-empty"),
    pytest.param(b'{"text": null}', TEXT, "wrong type", "field 'text' is null", id="null"),
    pytest.param(b'{"text": 3}', TEXT, "wrong type", "field 'text' is a number, expected a string", id="number"),
    pytest.param(b'{"text": ["a"]}', TEXT, "wrong type", "field 'text' is a list, expected a string", id="list"),
    pytest.param(b'{"text": true}', TEXT, "wrong type", "field 'text' is a boolean, expected a string", id="bool"),
    pytest.param(b'{"text": ""}', TEXT, "empty text", "field 'text' is empty", id="empty"),
    pytest.param(b'{"text": "caf\xe9"}', TEXT, "invalid UTF-8", "invalid UTF-8 (byte 0xe9 at column 14)", id="utf8"),
    pytest.param(
        b'{"text": "\\ud800 lone"}',
        TEXT,
        "invalid UTF-8",
        "field 'text' holds an unpaired surrogate ('\\ud800'), not valid text",
        id="surrogate",
    ),
    pytest.param(
        b'{"ids": "1 2"}',
        {"ids": "ids"},
        "wrong type",
        "field 'ids' is a string, expected a list of integers",
        id="ids-str",
    ),
    pytest.param(b'{"ids": []}', {"ids": "ids"}, "empty field", "field 'ids' is an empty list", id="ids-empty"),
    pytest.param(
        b'{"ids": [1, true]}',
        {"ids": "ids"},
        "wrong type",
        "field 'ids' item 1 is a boolean, expected an integer",
        id="ids-bool",
    ),
    pytest.param(
        b'{"ids": [1, 2.0]}',
        {"ids": "ids"},
        "wrong type",
        "field 'ids' item 1 is a number, expected an integer",
        id="ids-float",
    ),
    pytest.param(b'{"ids": [1, null]}', {"ids": "ids"}, "wrong type", "field 'ids' item 1 is null", id="ids-null"),
    pytest.param(
        b'{"ids": [1, 9999999999999999999]}',
        {"ids": "ids"},
        "wrong type",
        "field 'ids' item 1 does not fit in int64",
        id="ids-overflow",
    ),
    pytest.param(
        b'{"messages": "hi"}',
        {"messages": "messages"},
        "wrong type",
        "field 'messages' is a string, expected a list of messages",
        id="msgs-str",
    ),
    pytest.param(
        b'{"messages": []}',
        {"messages": "messages"},
        "empty field",
        "field 'messages' is an empty list",
        id="msgs-empty",
    ),
    pytest.param(
        b'{"messages": ["hi"]}',
        {"messages": "messages"},
        "wrong type",
        "field 'messages' item 0 is a string, expected an object with 'role' and 'content'",
        id="msgs-item",
    ),
    pytest.param(
        b'{"messages": [{"role": "user"}]}',
        {"messages": "messages"},
        "missing field",
        "field 'messages' item 0 has no 'content' (keys present: 'role')",
        id="msgs-missing",
    ),
    pytest.param(
        b'{"messages": [{"role": "user", "content": 1}]}',
        {"messages": "messages"},
        "wrong type",
        "field 'messages' item 0 'content' is a number, expected a string",
        id="msgs-content",
    ),
    pytest.param(
        b'{"messages": [{"role": "user", "content": "hi"}, {"role": "narrator", "content": "x"}]}',
        {"messages": "messages"},
        "unknown role",
        "field 'messages' item 1 'role' is 'narrator', not one of system, user, assistant, tool",
        id="msgs-role",
    ),
    pytest.param(b'{"meta": null}', {"meta": "any"}, "wrong type", "field 'meta' is null", id="any-null"),
    pytest.param(b"[" * 100_000, TEXT, "malformed JSON", "malformed JSON (", id="deep-nesting"),
    pytest.param(b'{"text": 1' + b"1" * 5000 + b"}", TEXT, "malformed JSON", "malformed JSON (", id="huge-int"),
]


@pytest.mark.parametrize("line,fields,reason,problem", BAD_JSONL)
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_bad_jsonl_record_fails_with_location_and_problem(tmp_path, suffix, line, fields, reason, problem):
    good = {
        name: {"text": "ok", "ids": [1], "messages": [{"role": "user", "content": "c"}], "any": 0}[kind]
        for name, kind in fields.items()
    }
    path = write_jsonl(tmp_path / f"data{suffix}", [good, line, good])
    message = fail_message([path], fields)
    assert message.startswith(f"{path}:2: {problem}")


@pytest.mark.parametrize("line,fields,reason,problem", BAD_JSONL)
def test_bad_jsonl_record_is_counted_under_skip(tmp_path, line, fields, reason, problem):
    good = {
        name: {"text": "ok", "ids": [1], "messages": [{"role": "user", "content": "c"}], "any": 0}[kind]
        for name, kind in fields.items()
    }
    path = write_jsonl(tmp_path / "data.jsonl", [good, line, good])
    got, bad = read_skipping([path], fields)
    assert [loc for loc, _ in got] == [f"{path}:1", f"{path}:3"]
    assert bad.counts == {reason: 1} and bad.total == 1
    assert bad.examples[0].startswith(f"{path}:2: {problem}")
    assert bad.records_seen == 3
    assert json.loads(json.dumps(bad.to_dict())) == {"total": 1, "by_reason": {reason: 1}, "examples": bad.examples}


@pytest.mark.parametrize(
    "line,reason",
    [
        (b'{"text": "a",}', "malformed JSON"),
        (b'{"text": "\\ud800"}', "invalid UTF-8"),  # orjson refuses it, json reads it, then we do
        (b"[" * 100_000, "malformed JSON"),
        (b'{"text": "caf\xe9"}', "invalid UTF-8"),
    ],
)
def test_records_orjson_refuses_get_json_s_verdict(tmp_path, line, reason):
    path = write_jsonl(tmp_path / "data.jsonl", [{"text": "ok"}, line])
    assert fail_message([path]).startswith(f"{path}:2: ")
    got, bad = read_skipping([path])
    assert len(got) == 1 and bad.total == 1 and bad.counts == {reason: 1}


def test_records_only_json_accepts_are_read(tmp_path):
    # orjson refuses NaN and Infinity; a record is what json.loads accepts.
    path = write_jsonl(tmp_path / "data.jsonl", [b'{"text": "a", "score": NaN}', b'{"text": "b", "score": -Infinity}'])
    got, bad = read_skipping([path])
    assert [record for _, record in got] == [{"text": "a"}, {"text": "b"}] and bad.total == 0


def test_many_keys_are_listed_briefly(tmp_path):
    path = write_jsonl(tmp_path / "wide.jsonl", [{f"k{i}": i for i in range(25)}])
    message = fail_message([path])
    assert message.startswith(f"{path}:1: missing field 'text' (fields present: 'k0', 'k1',")
    assert "... (15 more)" in message


def test_first_bad_record_stops_reading_under_fail(tmp_path):
    path = write_jsonl(tmp_path / "two-bad.jsonl", [{"text": "a"}, {"text": 1}, "{bad"])
    assert fail_message([path]) == f"{path}:2: field 'text' is a number, expected a string"


def test_stdin_bad_record_is_located(stdin):
    stdin(b'{"text": "a"}\n{"txt": "b"}\n')
    assert fail_message(["-"]) == "<stdin>:2: missing field 'text' (fields present: 'txt')"


TRUNCATED_LINES = 8000


@pytest.fixture(scope="module")
def half_of_compressed_file():
    """The first half of a compressed JSONL file, made once per compression for the module."""
    noise = np.random.default_rng(0).bytes(30 * TRUNCATED_LINES).hex()  # random, so the file is long
    data = b"".join(b'{"text": "%d %s"}\n' % (i, noise[60 * i : 60 * i + 60].encode()) for i in range(TRUNCATED_LINES))
    halves = {}
    for suffix in (".jsonl.gz", ".jsonl.zst"):
        compressed = compress(data, suffix)
        halves[suffix] = compressed[: len(compressed) // 2]
    return halves


@pytest.mark.parametrize("suffix,name", [(".jsonl.gz", "gzip"), (".jsonl.zst", "zstd")])
def test_truncated_stream_fails_at_the_line_where_it_broke(tmp_path, half_of_compressed_file, suffix, name):
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(half_of_compressed_file[suffix])
    message = fail_message([path])
    line = int(message.split(":")[-2])
    assert message == f"{path}:{line}: truncated {name} stream"
    assert TRUNCATED_LINES // 5 < line < TRUNCATED_LINES


@pytest.mark.parametrize("suffix,name", [(".jsonl.gz", "gzip"), (".jsonl.zst", "zstd")])
def test_truncated_stream_is_one_bad_record_under_skip(tmp_path, half_of_compressed_file, suffix, name):
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(half_of_compressed_file[suffix])
    after = write_jsonl(tmp_path / "after.jsonl", [{"text": "next file"}])
    got, bad = read_skipping([path, after])
    assert bad.counts == {"truncated stream": 1}
    assert bad.examples == [f"{path}:{len(got)}: truncated {name} stream"]  # the line after the last good one
    assert got[-1] == (f"{after}:1", {"text": "next file"})
    assert [r["text"].split()[0] for _, r in got[:-1]] == [str(i) for i in range(len(got) - 1)]
    assert bad.records_seen == len(got) + 1


def test_file_that_is_not_gzip_is_a_corrupt_stream(tmp_path):
    path = tmp_path / "plain.jsonl.gz"
    path.write_bytes(b'{"text": "not compressed"}\n')
    assert fail_message([path]).startswith(f"{path}:1: corrupt gzip stream (Not a gzipped file")
    got, bad = read_skipping([path])
    assert got == [] and bad.counts == {"corrupt stream": 1}


def test_garbage_zstd_is_a_corrupt_stream(tmp_path):
    path = tmp_path / "junk.jsonl.zst"
    path.write_bytes(b"this is not zstd at all\n" * 10)
    assert fail_message([path]).startswith(f"{path}:1: corrupt zstd stream (")


def test_corrupt_gzip_data_is_a_corrupt_stream(tmp_path):
    data = bytearray(gzip.compress(b"".join(b'{"text": "%d"}\n' % i for i in range(1000))))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "flipped.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(PackcliError, match=r"flipped\.jsonl\.gz:\d+: (corrupt|truncated) gzip stream"):
        read_all([path])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


messages = st.lists(st.dictionaries(st.sampled_from(["role", "content", "name"]), json_values, max_size=3), max_size=3)


records = st.dictionaries(
    st.sampled_from(["text", "ids", "messages", "meta", "other"]),
    json_values | st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=4) | messages,
    max_size=5,
)


def _encode(value, ensure_ascii: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


lines = st.one_of(
    st.binary(max_size=40),
    st.builds(_encode, json_values, st.booleans()),
    st.builds(_encode, records, st.booleans()),
).map(lambda line: line.replace(b"\n", b" "))


field_sets = st.sampled_from(
    [TEXT, {"ids": "ids"}, {"messages": "messages"}, {"text": "text", "ids": "ids", "meta": "any"}, {}]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.lists(lines, max_size=12), fields=field_sets, batch_size=st.integers(1, 4))
def test_random_input_only_ever_raises_packcli_error(stdin, body, fields, batch_size):
    data = b"\n".join(body)
    stdin(data)
    try:
        for _ in read_batches(["-"], fields, batch_size=batch_size):
            pass
    except PackcliError as e:
        assert "\n" not in str(e) and str(e).startswith("<stdin>:")

    stdin(data)
    bad = BadRecords()
    good = 0
    for batch in read_batches(["-"], fields, batch_size=batch_size, on_bad_record="skip", bad=bad):
        assert 1 <= len(batch) <= batch_size
        assert all(len(values) == len(batch) for values in batch.columns.values())
        for name, kind in fields.items():
            for value in batch.columns[name]:
                if kind == "text":
                    assert isinstance(value, str) and value and value.encode("utf-8")
                elif kind == "ids":
                    assert isinstance(value, np.ndarray) and value.dtype == np.int64 and value.size
        good += len(batch)
    assert good + bad.total == bad.records_seen == sum(1 for line in body if line.strip())
    assert all("\n" not in example for example in bad.examples)
