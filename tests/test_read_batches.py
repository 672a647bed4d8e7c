"""Tests for packcli.read.batches: read_batches over several inputs and formats, its options, and the
same records read the same from every format."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from packcli.core.errors import PackcliError
from packcli.read.batches import read_batches
from packcli.read.records import BadRecords
from tests.input_files import (
    TEXT,
    fail_message,
    plain,
    read_all,
    stdin_feeder,
    write_arrow,
    write_json,
    write_jsonl,
    write_parquet,
)


@pytest.fixture
def stdin(monkeypatch):
    """Feeds bytes to sys.stdin: `stdin(b"...")`."""
    return stdin_feeder(monkeypatch)


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
        ("empty-member.jsonl.gz", gzip.compress(b"", mtime=0)),  # no time in the header: the same id in every worker
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
