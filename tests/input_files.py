"""Input files for the reader tests: writers for every format, and read_all and friends,
which collect what read_batches yields as (location, record) pairs."""

from __future__ import annotations

import gzip
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from packcli.core.errors import PackcliError
from packcli.read.batches import read_batches
from packcli.read.records import BadRecords, IdLists

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT = {"text": "text"}


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


def stdin_feeder(monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], FakeStdin]:
    """What the tests' `stdin` fixture returns: feed(data) puts data on sys.stdin."""

    def feed(data: bytes) -> FakeStdin:
        fake = FakeStdin(data)
        monkeypatch.setattr(sys, "stdin", fake)
        return fake

    return feed


def write_json(path: Path, records, indent: int | None = 2) -> Path:
    data = json.dumps(records, indent=indent).encode("utf-8")
    path.write_bytes(compress(data, path.name))
    return path


def write_arrow(path: Path, table: pa.Table, file_format: bool = False, max_chunksize: int | None = None) -> Path:
    with pa.OSFile(str(path), "wb") as sink:
        new = pa.ipc.new_file if file_format else pa.ipc.new_stream
        with new(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max_chunksize)
    return path


def plain(value):
    """Column values as comparable Python: ids arrays to lists."""
    if isinstance(value, IdLists):
        return [x.tolist() for x in value]
    return list(value)
