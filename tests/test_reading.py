"""Tests for packcli.reading: every format round-trips, every bad record is named precisely."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli import read_json, reading
from packcli.errors import PackcliError
from packcli.reading import (
    SUPPORTED_SUFFIXES,
    BadRecords,
    RecordBatch,
    expand_inputs,
    read_batches,
)

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT = {"text": "text"}


# ----------------------------------------------------------------------------- helpers


def _to_line(record) -> bytes:
    if isinstance(record, bytes):
        return record
    if isinstance(record, str):
        return record.encode("utf-8")
    return json.dumps(record).encode("utf-8")


def _zstd_multi_frame(data: bytes) -> bytes:
    """Two frames, both written by a streaming writer so the content size is unknown."""
    out = io.BytesIO()
    half = len(data) // 2
    for part in (data[:half], data[half:]):
        frame = io.BytesIO()
        with zstandard.ZstdCompressor().stream_writer(frame, closefd=False) as writer:
            writer.write(part)
        out.write(frame.getvalue())
    return out.getvalue()


def compress(data: bytes, suffix: str) -> bytes:
    if suffix.endswith(".gz"):
        return gzip.compress(data)
    if suffix.endswith(".zst"):
        return _zstd_multi_frame(data)
    return data


def write_jsonl(path: Path, records) -> Path:
    """Records are dicts (dumped), str or bytes (written as the line itself)."""
    data = b"".join(_to_line(r) + b"\n" for r in records)
    path.write_bytes(compress(data, path.name))
    return path


def write_parquet(path: Path, columns: dict, schema: pa.Schema | None = None, **kwargs) -> Path:
    pq.write_table(pa.table(columns, schema=schema), path, **kwargs)
    return path


def read_all(paths, fields=TEXT, **kwargs) -> list[tuple[str, dict]]:
    """(location, record) for every good record, in order."""
    out = []
    for batch in read_batches([str(p) for p in paths], fields, **kwargs):
        for i in range(len(batch)):
            out.append((batch.location(i), {name: values[i] for name, values in batch.columns.items()}))
    return out


def read_skipping(paths, fields=TEXT, **kwargs) -> tuple[list[tuple[str, dict]], BadRecords]:
    bad = BadRecords()
    return read_all(paths, fields, on_bad_record="skip", bad=bad, **kwargs), bad


def fail_message(paths, fields=TEXT, **kwargs) -> str:
    with pytest.raises(PackcliError) as caught:
        read_all(paths, fields, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


class FakeStdin:
    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


@pytest.fixture
def stdin(monkeypatch):
    def feed(data: bytes) -> FakeStdin:
        fake = FakeStdin(data)
        monkeypatch.setattr(sys, "stdin", fake)
        return fake

    return feed


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", JSONL_SUFFIXES)
def test_jsonl_round_trip(tmp_path, suffix):
    texts = [f"document {i} — ünïcode ✓" for i in range(50)]
    path = write_jsonl(tmp_path / f"data{suffix}", [{"text": t, "id": i} for i, t in enumerate(texts)])
    got = read_all([path])
    assert [r["text"] for _, r in got] == texts
    assert got[0][0] == f"{path}:1" and got[-1][0] == f"{path}:50"


def test_parquet_round_trip(tmp_path):
    texts = [f"row {i}" for i in range(30)]
    path = write_parquet(tmp_path / "data.parquet", {"text": texts, "other": list(range(30))}, row_group_size=7)
    got = read_all([path])
    assert [r["text"] for _, r in got] == texts
    assert got[0][0] == f"{path} row 0" and got[-1][0] == f"{path} row 29"


def test_parquet_large_string_and_dictionary_columns(tmp_path):
    large = write_parquet(tmp_path / "large.parquet", {"text": pa.array(["a", "b"], pa.large_string())})
    dictionary = write_parquet(tmp_path / "dict.parquet", {"text": pa.array(["x", "y", "x"]).dictionary_encode()})
    assert [r["text"] for _, r in read_all([large, dictionary])] == ["a", "b", "x", "y", "x"]


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


def test_parquet_ids_messages_any(tmp_path):
    ids = [[1, 2, 3], [4], [5, 6]]
    messages = [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(3)]
    path = write_parquet(tmp_path / "chat.parquet", {"ids": ids, "messages": messages, "score": [0.5, 1.0, 2.0]})
    got = read_all([path], {"ids": "ids", "messages": "messages", "score": "any"})
    assert [r["ids"].tolist() for _, r in got] == ids
    assert all(r["ids"].dtype == np.int64 for _, r in got)
    assert [r["messages"] for _, r in got] == messages
    assert [r["score"] for _, r in got] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    "arrow_type", [pa.list_(pa.int32()), pa.large_list(pa.uint16()), pa.list_(pa.int64(), 2)], ids=str
)
def test_parquet_ids_list_types(tmp_path, arrow_type):
    path = write_parquet(tmp_path / "ids.parquet", {"ids": pa.array([[1, 2], [3, 4], [5, 6]], arrow_type)})
    got = read_all([path], {"ids": "ids"}, batch_size=2)
    assert [r["ids"].tolist() for _, r in got] == [[1, 2], [3, 4], [5, 6]]
    assert all(r["ids"].dtype == np.int64 for _, r in got)


def test_blank_lines_are_skipped_silently_and_lines_keep_their_numbers(tmp_path):
    path = write_jsonl(tmp_path / "gaps.jsonl", ["", {"text": "a"}, "   \t", "\r", {"text": "b"}])
    got, bad = read_skipping([path])
    assert got == [(f"{path}:2", {"text": "a"}), (f"{path}:5", {"text": "b"})]
    assert bad.total == 0 and bad.records_seen == 2


def test_windows_line_endings_and_bom(tmp_path):
    path = tmp_path / "win.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a"}\r\n{"text": "b"}\r\n')
    assert [r["text"] for _, r in read_all([path])] == ["a", "b"]


def test_several_inputs_are_read_in_order_given(tmp_path, stdin):
    stdin(b'{"text": "from stdin"}\n')
    first = write_parquet(tmp_path / "b.parquet", {"text": ["parquet"]})
    second = write_jsonl(tmp_path / "a.jsonl.gz", [{"text": "gz"}])
    got = read_all([first, "-", second, first])
    assert [r["text"] for _, r in got] == ["parquet", "from stdin", "gz", "parquet"]


@pytest.mark.parametrize(
    "name,data",
    [
        ("empty.jsonl", b""),
        ("empty.jsonl.gz", b""),
        ("empty-member.jsonl.gz", gzip.compress(b"")),
        ("empty.jsonl.zst", b""),
        ("empty-frame.jsonl.zst", zstandard.ZstdCompressor().compress(b"")),
        ("blank.jsonl", b"\n\n  \n"),
        ("empty.parquet", b""),
    ],
)
def test_empty_files_yield_nothing(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    bad = BadRecords()
    assert list(read_batches([str(path)], TEXT, bad=bad)) == []
    assert bad.records_seen == 0


def test_parquet_with_zero_rows_yields_nothing(tmp_path):
    path = write_parquet(tmp_path / "none.parquet", {"text": pa.array([], pa.string())})
    assert list(read_batches([str(path)], TEXT)) == []


def test_concatenated_gzip_members_are_read_as_one_file(tmp_path):
    path = tmp_path / "joined.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a"}\n') + gzip.compress(b'{"text": "b"}\n'))
    assert read_all([path]) == [(f"{path}:1", {"text": "a"}), (f"{path}:2", {"text": "b"})]


# ----------------------------------------------------------------------------- batching


@pytest.mark.parametrize("suffix", JSONL_SUFFIXES + (".parquet",))
def test_batch_size_two_over_five_records(tmp_path, suffix):
    texts = [f"t{i}" for i in range(5)]
    if suffix == ".parquet":
        path = write_parquet(tmp_path / "five.parquet", {"text": texts}, row_group_size=3)
    else:
        path = write_jsonl(tmp_path / f"five{suffix}", [{"text": t} for t in texts])
    batches = list(read_batches([str(path)], TEXT, batch_size=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [t for b in batches for t in b.columns["text"]] == texts
    assert all(isinstance(b, RecordBatch) and b.positions.dtype == np.int64 for b in batches)
    first = 1 if suffix != ".parquet" else 0
    assert [p for b in batches for p in b.positions.tolist()] == list(range(first, first + 5))


def test_batches_never_mix_sources(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}] * 3)
    b = write_parquet(tmp_path / "b.parquet", {"text": ["b"] * 3})
    batches = list(read_batches([str(a), str(b)], TEXT, batch_size=2))
    assert [(x.source, x.kind, len(x)) for x in batches] == [
        (str(a), "line", 2),
        (str(a), "line", 1),
        (str(b), "row", 2),
        (str(b), "row", 1),
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_batches_fill_up_with_good_records_around_bad_ones(tmp_path, fmt):
    texts = ["a", None, "b", "", "c", "d", None, "e"]
    if fmt == "parquet":
        path = write_parquet(tmp_path / "mixed.parquet", {"text": texts})
    else:
        path = write_jsonl(tmp_path / "mixed.jsonl", [{"text": t} for t in texts])
    bad = BadRecords()
    batches = list(read_batches([str(path)], TEXT, batch_size=2, on_bad_record="skip", bad=bad))
    assert [b.columns["text"] for b in batches] == [["a", "b"], ["c", "d"], ["e"]]
    assert bad.counts == {"wrong type": 2, "empty text": 1}
    assert bad.records_seen == 8


# ----------------------------------------------------------------------------- expanding inputs


def test_directory_is_expanded_recursively_sorted_and_filtered(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for name in [
        "b.jsonl",
        "a.parquet",
        "sub/c.jsonl.zst",
        "sub/deeper/d.jsonl.gz",
        "notes.txt",
        "x.json",
        "y.arrow",
        "z.json.gz",
        ".hidden/e.jsonl",
        ".f.jsonl",
        "UPPER.JSONL",
        "state.json",
    ]:
        (root / name).write_bytes(b"")
    got = expand_inputs([str(root)])
    assert got == [
        str(root / n)
        for n in [
            "UPPER.JSONL",
            "a.parquet",
            "b.jsonl",
            "state.json",
            "sub/c.jsonl.zst",
            "sub/deeper/d.jsonl.gz",
            "x.json",
            "y.arrow",
            "z.json.gz",
        ]
    ]


def test_glob_is_expanded_sorted_and_filtered(tmp_path):
    for name in ["s10.jsonl", "s02.jsonl", "s01.parquet", "s03.txt"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sdir.jsonl").mkdir()  # a directory whose name looks like a file is not matched
    got = expand_inputs([str(tmp_path / "s*")])
    assert got == [str(tmp_path / n) for n in ["s01.parquet", "s02.jsonl", "s10.jsonl"]]


def test_recursive_glob(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "deep.jsonl").write_bytes(b"")
    (tmp_path / "top.jsonl").write_bytes(b"")
    assert expand_inputs([str(tmp_path / "**" / "*.jsonl")]) == [
        str(tmp_path / "top.jsonl"),
        str(tmp_path / "x" / "y" / "deep.jsonl"),
    ]


def test_inputs_keep_their_order_duplicates_and_stdin(tmp_path):
    b = tmp_path / "b.jsonl"
    a = tmp_path / "a.parquet"
    b.write_bytes(b"")
    a.write_bytes(b"")
    assert expand_inputs([str(b), "-", str(a), str(b)]) == [str(b), "-", str(a), str(b)]


def test_literal_file_name_with_glob_characters(tmp_path):
    path = tmp_path / "shard[1].jsonl"
    path.write_bytes(b"")
    assert expand_inputs([str(path)]) == [str(path)]


def test_relative_paths_stay_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("d").mkdir()
    Path("d/x.jsonl").write_bytes(b"")
    assert expand_inputs(["d", "d/*.jsonl"]) == [os.path.join("d", "x.jsonl"), "d/x.jsonl"]


@pytest.mark.parametrize(
    "make,given,expected",
    [
        (None, "missing.jsonl", "missing.jsonl: no such file or directory"),
        (None, "nothing*.jsonl", "nothing*.jsonl: pattern matches no"),
        (
            "data.csv",
            "data.csv",
            "data.csv: unsupported file type (supported: .jsonl, .jsonl.gz, .jsonl.zst, .json, "
            ".json.gz, .json.zst, .parquet, .arrow)",
        ),
        ("only.txt", "only.*", "only.*: pattern matches no .jsonl"),
        ("emptydir/", "emptydir", "emptydir: directory has no .jsonl"),
    ],
)
def test_expand_inputs_errors(tmp_path, monkeypatch, make, given, expected):
    monkeypatch.chdir(tmp_path)
    if make and make.endswith("/"):
        Path(make).mkdir()
    elif make:
        Path(make).write_bytes(b"")
    with pytest.raises(PackcliError) as caught:
        expand_inputs([given])
    assert str(caught.value).startswith(expected)


def test_expand_inputs_needs_at_least_one_input():
    with pytest.raises(PackcliError):
        expand_inputs([])


def test_supported_suffixes_are_the_documented_ones():
    assert SUPPORTED_SUFFIXES == (
        ".jsonl",
        ".jsonl.gz",
        ".jsonl.zst",
        ".json",
        ".json.gz",
        ".json.zst",
        ".parquet",
        ".arrow",
    )
    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    input_row = next(line for line in docs.splitlines() if line.startswith("| `INPUT...`"))
    assert all(f"`{suffix}`" in input_row for suffix in SUPPORTED_SUFFIXES)


# ----------------------------------------------------------------------------- bad JSONL records

# (line written at line 2, fields, reason counted under skip, problem in the message)
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
    pytest.param(b'{"meta": null}', {"meta": "any"}, "wrong type", "field 'meta' is null", id="any-null"),
    pytest.param(b"[" * 100_000, TEXT, "malformed JSON", "malformed JSON (", id="deep-nesting"),
    pytest.param(b'{"text": 1' + b"1" * 5000 + b"}", TEXT, "malformed JSON", "malformed JSON (", id="huge-int"),
]


@pytest.mark.parametrize("line,fields,reason,problem", BAD_JSONL)
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_bad_jsonl_record_fails_with_location_and_problem(tmp_path, suffix, line, fields, reason, problem):
    good = {
        name: {"text": "ok", "ids": [1], "messages": [{"role": "u", "content": "c"}], "any": 0}[kind]
        for name, kind in fields.items()
    }
    path = write_jsonl(tmp_path / f"data{suffix}", [good, line, good])
    message = fail_message([path], fields)
    assert message.startswith(f"{path}:2: {problem}")


@pytest.mark.parametrize("line,fields,reason,problem", BAD_JSONL)
def test_bad_jsonl_record_is_counted_under_skip(tmp_path, line, fields, reason, problem):
    good = {
        name: {"text": "ok", "ids": [1], "messages": [{"role": "u", "content": "c"}], "any": 0}[kind]
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


def test_examples_are_capped_but_counts_are_not(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", ["{oops"] * 25 + [{"text": "fine"}])
    got, bad = read_skipping([path])
    assert len(got) == 1
    assert bad.counts == {"malformed JSON": 25}
    assert len(bad.examples) == 10
    assert bad.examples[9].startswith(f"{path}:10: malformed JSON")


def test_first_bad_record_stops_reading_under_fail(tmp_path):
    path = write_jsonl(tmp_path / "two-bad.jsonl", [{"text": "a"}, {"text": 1}, "{bad"])
    assert fail_message([path]) == f"{path}:2: field 'text' is a number, expected a string"


def test_stdin_bad_record_is_located(stdin):
    stdin(b'{"text": "a"}\n{"txt": "b"}\n')
    assert fail_message(["-"]) == "<stdin>:2: missing field 'text' (fields present: 'txt')"


# ----------------------------------------------------------------------------- broken streams


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


# ----------------------------------------------------------------------------- bad Parquet files and rows


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_parquet_missing_column_is_fatal(tmp_path, mode):
    path = write_parquet(tmp_path / "qa.parquet", {"question": ["q"], "answer": ["a"]})
    message = fail_message([path], on_bad_record=mode, bad=BadRecords())
    assert message == f"{path}: no column 'text' (columns: 'question', 'answer')"


@pytest.mark.parametrize("mode", ["fail", "skip"])
@pytest.mark.parametrize(
    "column,kind,expected",
    [
        (pa.array([1, 2], pa.int64()), "text", "column 'x' has type int64, expected a string"),
        (pa.array([b"a"], pa.binary()), "text", "column 'x' has type binary, expected a string"),
        (pa.array([["a"]]), "ids", "column 'x' has type list<element: string>, expected a list of integers"),
        (pa.array([1]), "ids", "column 'x' has type int64, expected a list of integers"),
        (pa.array([[{"role": "u"}]]), "messages", "column 'x' has type list<element: struct<role: string>>, expected"),
        (pa.array(["hi"]), "messages", "column 'x' has type string, expected a list of structs"),
    ],
)
def test_parquet_wrong_column_type_is_fatal(tmp_path, mode, column, kind, expected):
    path = write_parquet(tmp_path / "typed.parquet", {"x": column})
    message = fail_message([path], {"x": kind}, on_bad_record=mode, bad=BadRecords())
    assert message.startswith(f"{path}: {expected}")


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_unreadable_parquet_is_fatal(tmp_path, mode):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 definitely not parquet")
    message = fail_message([path], on_bad_record=mode, bad=BadRecords())
    assert message.startswith(f"{path}: cannot read Parquet file (")


def test_truncated_parquet_is_fatal(tmp_path):
    path = write_parquet(tmp_path / "cut.parquet", {"text": [f"row {i}" for i in range(1000)]})
    path.write_bytes(path.read_bytes()[:-100])
    assert fail_message([path], on_bad_record="skip", bad=BadRecords()).startswith(f"{path}: cannot read Parquet")


def _invalid_utf8_strings() -> pa.Array:
    offsets = np.array([0, 2, 4, 6], dtype=np.int32).tobytes()
    return pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(offsets), pa.py_buffer(b"ok\xff\xfeok")])


# (column values for rows 0..2 with row 1 bad, fields, reason, problem)
BAD_PARQUET = [
    pytest.param({"text": ["a", None, "c"]}, TEXT, "wrong type", "field 'text' is null", id="null"),
    pytest.param({"text": ["a", "", "c"]}, TEXT, "empty text", "field 'text' is empty", id="empty"),
    pytest.param({"text": _invalid_utf8_strings()}, TEXT, "invalid UTF-8", "invalid UTF-8 (byte 0xff)", id="utf8"),
    pytest.param({"ids": [[1], None, [3]]}, {"ids": "ids"}, "wrong type", "field 'ids' is null", id="ids-null"),
    pytest.param(
        {"ids": [[1], [], [3]]}, {"ids": "ids"}, "empty field", "field 'ids' is an empty list", id="ids-empty"
    ),
    pytest.param(
        {"ids": [[1], [2, None], [3]]}, {"ids": "ids"}, "wrong type", "field 'ids' item 1 is null", id="ids-item-null"
    ),
    pytest.param(
        {"ids": pa.array([[1], [2**63], [3]], pa.list_(pa.uint64()))},
        {"ids": "ids"},
        "wrong type",
        "field 'ids' item 0 does not fit in int64",
        id="ids-uint64",
    ),
    pytest.param(
        {"m": [[{"role": "u", "content": "c"}], None, [{"role": "u", "content": "c"}]]},
        {"m": "messages"},
        "wrong type",
        "field 'm' is null",
        id="msgs-null",
    ),
    pytest.param(
        {"m": [[{"role": "u", "content": "c"}], [], [{"role": "u", "content": "c"}]]},
        {"m": "messages"},
        "empty field",
        "field 'm' is an empty list",
        id="msgs-empty",
    ),
    pytest.param(
        {"m": [[{"role": "u", "content": "c"}], [{"role": "u", "content": None}], [{"role": "u", "content": "c"}]]},
        {"m": "messages"},
        "wrong type",
        "field 'm' item 0 'content' is null",
        id="msgs-content-null",
    ),
    pytest.param({"v": [1, None, 3]}, {"v": "any"}, "wrong type", "field 'v' is null", id="any-null"),
]


@pytest.mark.parametrize("columns,fields,reason,problem", BAD_PARQUET)
def test_bad_parquet_row_fails_with_row_and_problem(tmp_path, columns, fields, reason, problem):
    path = write_parquet(tmp_path / "data.parquet", columns)
    assert fail_message([path], fields) == f"{path} row 1: {problem}"


@pytest.mark.parametrize("columns,fields,reason,problem", BAD_PARQUET)
def test_bad_parquet_row_is_counted_under_skip(tmp_path, columns, fields, reason, problem):
    path = write_parquet(tmp_path / "data.parquet", columns)
    got, bad = read_skipping([path], fields)
    assert [loc for loc, _ in got] == [f"{path} row 0", f"{path} row 2"]
    assert bad.counts == {reason: 1}
    assert bad.examples == [f"{path} row 1: {problem}"]
    assert bad.records_seen == 3


def test_parquet_first_bad_row_wins_across_fields(tmp_path):
    path = write_parquet(tmp_path / "two.parquet", {"a": ["x", "x", None], "b": ["x", "", "x"]})
    assert fail_message([path], {"a": "text", "b": "text"}) == f"{path} row 1: field 'b' is empty"


def test_parquet_rows_are_numbered_across_batches(tmp_path):
    texts = ["t"] * 10
    texts[7] = None
    path = write_parquet(tmp_path / "ten.parquet", {"text": texts}, row_group_size=4)
    assert fail_message([path], batch_size=3) == f"{path} row 7: field 'text' is null"


# ----------------------------------------------------------------------------- misuse


def test_nonexistent_path_given_to_read_batches(tmp_path):
    for name in ["gone.jsonl", "gone.jsonl.gz", "gone.parquet"]:
        message = fail_message([tmp_path / name])
        assert message.startswith(f"{tmp_path / name}: cannot open (No such file")


def test_unsupported_suffix_given_to_read_batches(tmp_path):
    assert "supported: .jsonl, .jsonl.gz, .jsonl.zst, .json, .json.gz, .json.zst, .parquet, .arrow" in fail_message(
        [tmp_path / "x.csv"]
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"on_bad_record": "ignore"}, "--on-bad-record must be one of fail, skip, not 'ignore'"),
        ({"batch_size": 0}, "batch size must be at least 1"),
        ({"fields": {"text": "tokens"}}, "field 'text': unknown kind 'tokens'"),
    ],
)
def test_bad_options_fail_at_the_call(tmp_path, kwargs, match):
    kwargs = {"fields": TEXT, **kwargs}
    with pytest.raises(PackcliError, match=match):
        read_batches([str(tmp_path / "x.jsonl")], **kwargs)  # no iteration needed


# ----------------------------------------------------------------------------- never anything but PackcliError

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


# ----------------------------------------------------------------------------- JSON arrays


def write_json(path: Path, records, indent: int | None = 2) -> Path:
    data = json.dumps(records, indent=indent).encode("utf-8")
    path.write_bytes(compress(data, path.name))
    return path


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


# (file content, line of the break, problem); records before the break are good
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


# ----------------------------------------------------------------------------- Arrow IPC and save_to_disk


def write_arrow(path: Path, table: pa.Table, file_format: bool = False, max_chunksize: int | None = None) -> Path:
    with pa.OSFile(str(path), "wb") as sink:
        new = pa.ipc.new_file if file_format else pa.ipc.new_stream
        with new(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max_chunksize)
    return path


@pytest.mark.parametrize("file_format", [False, True], ids=["stream", "file"])
def test_arrow_round_trip_in_batches(tmp_path, file_format):
    table = pa.table({"text": [f"row {i}" for i in range(25)], "ids": [[i, i + 1] for i in range(25)]})
    path = write_arrow(tmp_path / "data.arrow", table, file_format, max_chunksize=10)
    batches = list(read_batches([str(path)], {"text": "text", "ids": "ids"}, batch_size=4))
    assert [len(b) for b in batches] == [4] * 6 + [1]
    got = [(b.location(i), b.columns["text"][i], b.columns["ids"][i].tolist()) for b in batches for i in range(len(b))]
    assert got == [(f"{path} row {i}", f"row {i}", [i, i + 1]) for i in range(25)]


def test_arrow_bad_rows_are_reported_by_row_across_batches(tmp_path):
    ids = [[i] for i in range(20)]
    ids[3], ids[11], ids[12] = None, [], [5, None]
    path = write_arrow(tmp_path / "data.arrow", pa.table({"ids": ids}), max_chunksize=7)
    got, bad = read_skipping([path], {"ids": "ids"}, batch_size=4)
    assert [loc for loc, _ in got] == [f"{path} row {i}" for i in range(20) if i not in (3, 11, 12)]
    assert [r["ids"].tolist() for _, r in got] == [[i] for i in range(20) if i not in (3, 11, 12)]
    assert bad.examples == [
        f"{path} row 3: field 'ids' is null",
        f"{path} row 11: field 'ids' is an empty list",
        f"{path} row 12: field 'ids' item 1 is null",
    ]
    assert fail_message([path], {"ids": "ids"}) == f"{path} row 3: field 'ids' is null"


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_unreadable_or_mistyped_arrow_is_fatal(tmp_path, mode):
    garbage = tmp_path / "garbage.arrow"
    garbage.write_bytes(b"not arrow at all")
    assert fail_message([garbage], on_bad_record=mode, bad=BadRecords()).startswith(
        f"{garbage}: cannot read Arrow file ("
    )
    typed = write_arrow(tmp_path / "typed.arrow", pa.table({"text": [1, 2]}))
    assert fail_message([typed], on_bad_record=mode, bad=BadRecords()) == (
        f"{typed}: column 'text' has type int64, expected a string"
    )


def test_empty_arrow_file_holds_no_records(tmp_path):
    (tmp_path / "empty.arrow").write_bytes(b"")
    assert read_all([tmp_path / "empty.arrow"]) == []


def save_to_disk(path: Path, records: dict, num_shards: int = 1) -> Path:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(records).save_to_disk(str(path), num_shards=num_shards)
    return path


def test_save_to_disk_directory_is_read_in_state_order(tmp_path):
    texts = [f"doc {i}" for i in range(10)]
    saved = save_to_disk(tmp_path / "ds", {"text": texts, "ids": [[i] * (i + 1) for i in range(10)]}, num_shards=3)
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"].reverse()  # the order of state.json, not of the names, is the dataset's order
    (saved / "state.json").write_text(json.dumps(state))
    paths = expand_inputs([str(saved)])
    assert paths == [str(saved / entry["filename"]) for entry in state["_data_files"]]
    got = read_all(paths, {"text": "text", "ids": "ids"})
    shard_texts = [texts[7:], texts[4:7], texts[:4]]
    assert [r["text"] for _, r in got] == [t for shard in shard_texts for t in shard]
    assert got[0][0] == f"{saved / state['_data_files'][0]['filename']} row 0"


def test_save_to_disk_inside_a_folder_counts_as_its_data_files(tmp_path):
    save_to_disk(tmp_path / "corpus" / "b_ds", {"text": ["x"]})
    for name in ["a.jsonl", "c.json", "b.parquet"]:
        (tmp_path / "corpus" / name).write_bytes(b"")
    got = expand_inputs([str(tmp_path / "corpus")])
    names = [os.path.relpath(p, tmp_path / "corpus") for p in got]
    assert names == ["a.jsonl", "b.parquet", os.path.join("b_ds", "data-00000-of-00001.arrow"), "c.json"]


def test_save_to_disk_metadata_is_never_data(tmp_path):
    saved = save_to_disk(tmp_path / "ds", {"text": ["x"]})
    assert expand_inputs([str(saved / "*")]) == [str(saved / "data-00000-of-00001.arrow")]
    with pytest.raises(PackcliError) as caught:
        expand_inputs([str(saved / "state.json")])
    assert (
        str(caught.value)
        == f"{saved / 'state.json'}: metadata of a datasets save_to_disk directory; give the directory ({saved})"
    )


def test_dataset_dict_directory_is_refused_naming_its_splits(tmp_path):
    import datasets

    datasets.disable_progress_bars()
    split = datasets.Dataset.from_dict({"text": ["x"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    for where in [tmp_path / "dd", tmp_path]:
        with pytest.raises(PackcliError) as caught:
            expand_inputs([str(where)])
        dd = tmp_path / "dd"
        assert (
            str(caught.value)
            == f"{dd}: a datasets DatasetDict; give one split as input ({dd / 'train'}, {dd / 'test'})"
        )
    assert expand_inputs([str(tmp_path / "dd" / "train")]) == [
        str(tmp_path / "dd" / "train" / "data-00000-of-00001.arrow")
    ]


def test_missing_data_file_of_a_dataset(tmp_path):
    saved = save_to_disk(tmp_path / "ds", {"text": ["x"]})
    (saved / "data-00000-of-00001.arrow").unlink()
    with pytest.raises(PackcliError, match="data-00000-of-00001.arrow: listed in .*state.json but missing"):
        expand_inputs([str(saved)])


# ----------------------------------------------------------------------------- one record, every format

SHAPES = {
    "text": ({"text": "text"}, [{"text": "first ✓"}, {"text": "second"}, {"text": "third"}]),
    "prompt-completion": ({"p": "text", "c": "text"}, [{"p": "2+3?", "c": " 5"}, {"p": "hi", "c": " there"}]),
    "messages": (
        {"m": "messages"},
        [
            {"m": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]},
            {"m": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go"}]},
        ],
    ),
    "messages-extra-fields": (
        {"m": "messages"},
        [
            {
                "m": [
                    {"role": "user", "content": "Hi?", "name": "ann"},
                    {"role": "assistant", "content": "", "name": "bot"},
                ]
            },
        ],
    ),
    "sharegpt": (
        {"m": "messages"},
        [
            {"m": [{"from": "human", "value": "Who?"}, {"from": "gpt", "value": "Me."}]},
            {"m": [{"from": "system", "value": "Sys"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]},
        ],
    ),
    "ids": (
        {"ids": "ids", "labels": "ids"},
        [{"ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"ids": [70000], "labels": [7]}],
    ),
}


def write_as(path: Path, records: list[dict]) -> Path:
    suffix = path.name.split(".", 1)[1]
    if suffix == "jsonl":
        return write_jsonl(path, records)
    if suffix == "json":
        return write_json(path, records)
    table = pa.Table.from_pylist(records)
    if suffix == "parquet":
        pq.write_table(table, path)
        return path
    return write_arrow(path, table, file_format=suffix == "file.arrow")


def plain(value):
    """Column values as comparable Python: ids arrays to lists."""
    if isinstance(value, reading.IdLists):
        return [x.tolist() for x in value]
    return list(value)


@pytest.mark.parametrize("shape", SHAPES)
def test_same_records_read_the_same_from_every_format(tmp_path, shape):
    fields, records = SHAPES[shape]
    results = {}
    for name in ["d.jsonl", "d.json", "d.parquet", "d.arrow", "d.file.arrow"]:
        path = write_as(tmp_path / name, records)
        batches = list(read_batches([str(path)], fields))
        assert len(batches) == 1 and len(batches[0]) == len(records)
        results[name] = {field_name: plain(batches[0].columns[field_name]) for field_name in fields}
    assert all(result == results["d.jsonl"] for result in results.values()), results


@pytest.mark.parametrize(
    "column",
    [
        pa.array(["a", "b"], pa.large_string()),
        pa.array(["a", "b"]).dictionary_encode(),
        pa.array(["a", "b"], pa.string_view()),
    ],
    ids=["large_string", "dictionary", "string_view"],
)
def test_text_column_types_read_as_text(tmp_path, column):
    path = write_arrow(tmp_path / "t.arrow", pa.table({"text": column}))
    assert [r["text"] for _, r in read_all([path])] == ["a", "b"]


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.list_(pa.int32()),
        pa.large_list(pa.int64()),
        pa.list_(pa.uint16()),
        pa.list_(pa.int64(), 2),
        pa.list_(pa.uint64()),
        pa.large_list(pa.int8()),
    ],
    ids=str,
)
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_ids_column_types_read_as_int64(tmp_path, arrow_type, suffix):
    table = pa.table({"ids": pa.array([[1, 2], [3, 4], [5, 6]], arrow_type)})
    path = tmp_path / f"ids{suffix}"
    pq.write_table(table, path) if suffix == ".parquet" else write_arrow(path, table)
    batches = list(read_batches([str(path)], {"ids": "ids"}, batch_size=2))
    assert all(isinstance(b.columns["ids"], reading.IdLists) for b in batches)
    assert [b.columns["ids"].values.dtype for b in batches] == [np.int64, np.int64]
    assert [plain(b.columns["ids"]) for b in batches] == [[[1, 2], [3, 4]], [[5, 6]]]


def test_messages_column_mixing_both_shapes(tmp_path):
    """One table with ShareGPT and OpenAI turns: Arrow fills the other shape's fields with nulls."""
    records = [
        {"m": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]},
        {"m": [{"role": "user", "content": "Q2"}]},
    ]
    path = write_arrow(tmp_path / "mixed.arrow", pa.Table.from_pylist(records))
    got = read_all([path], {"m": "messages"})
    assert [r["m"] for _, r in got] == [
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
        [{"role": "user", "content": "Q2"}],
    ]


def test_sharegpt_column_with_an_unknown_speaker(tmp_path):
    path = write_parquet(
        tmp_path / "s.parquet", {"m": [[{"from": "human", "value": "Q"}], [{"from": "robot", "value": "A"}]]}
    )
    assert fail_message([path], {"m": "messages"}).startswith(
        f"{path} row 1: field 'm' item 0 'from' is 'robot', not one of"
    )


# ----------------------------------------------------------------------------- JSONL token ids


def test_ids_column_is_flat(tmp_path):
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [1, 2, 3]}, {"ids": [4]}, {"ids": [5, 6]}])
    [batch] = read_batches([str(path)], {"ids": "ids"})
    ids = batch.columns["ids"]
    assert isinstance(ids, reading.IdLists) and len(ids) == 3
    assert ids.values.tolist() == [1, 2, 3, 4, 5, 6] and ids.offsets.tolist() == [0, 3, 4, 6]
    assert ids.lengths.tolist() == [3, 1, 2] and ids[-1].tolist() == [5, 6]
    with pytest.raises(IndexError):
        ids[3]
