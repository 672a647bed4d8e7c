"""Input records: JSON Lines, JSON arrays, Parquet, Arrow IPC and stdin, streamed in batches.

    def read_batches(paths, fields, *, batch_size=1024, on_bad_record="fail", bad=None)
        -> Iterator[RecordBatch]

The options are checked here and each file goes to its format's reader. Where the pieces
live (data flows one way, down this list):

    checks.py      the per-kind validators every format shares, RecordProblem
    records.py     RecordBatch, IdLists, BadRecords, BatchBuilder (batches bounded in size)
    inputs.py      expand_inputs: files, directories, globs, save_to_disk datasets
    jsonl.py       read_record_jsonl: JSON Lines, gzip/zstd streams, stdin; JSON record parsing
    json_array.py  read_record_json: JSON arrays, scanned element by element
    columnar.py    read_record_parquet, read_record_arrow: one columnar path, ids kept flat
    batches.py     read_batches: the options checked, one reader per file
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence

from packcli.core.errors import PackcliError
from packcli.read.checks import FIELD_KINDS, VALIDATORS, FieldKind
from packcli.read.inputs import (
    JSON_SUFFIXES,
    JSONL_SUFFIXES,
    STDIN,
    STDIN_NAME,
    supported_list,
)
from packcli.read.json_array import read_record_json
from packcli.read.jsonl import read_record_jsonl
from packcli.read.records import BadRecords, BatchBuilder, RecordBatch

ON_BAD_RECORD_CHOICES = ("fail", "skip")


def read_batches(
    paths: Sequence[str],
    fields: Mapping[str, FieldKind],
    *,
    batch_size: int = 1024,
    on_bad_record: str = "fail",
    bad: BadRecords | None = None,
    sections: Mapping[str, tuple[int, ...]] | None = None,
) -> Generator[RecordBatch, None, None]:
    """Stream good records from each path in order, in batches that never mix two sources.
    `sections`: read only a part of these paths: row groups (lo, hi) of a Parquet file,
    (start byte, end byte, first line number) of a plain JSON Lines file.

    Under "fail" the first bad record raises PackcliError("<location>: <problem>"); under
    "skip" it is counted in `bad` and reading goes on. `bad.records_seen` counts all records.
    """
    if on_bad_record not in ON_BAD_RECORD_CHOICES:
        choices = ", ".join(ON_BAD_RECORD_CHOICES)
        raise PackcliError(f"--on-bad-record must be one of {choices}, not {on_bad_record!r}")
    if batch_size < 1:
        raise PackcliError(f"batch size must be at least 1, not {batch_size}")
    for name, kind in fields.items():
        if kind not in FIELD_KINDS:
            raise PackcliError(f"field {name!r}: unknown kind {kind!r} (kinds: {', '.join(FIELD_KINDS)})")
    bad = bad if bad is not None else BadRecords()
    return _read_all(list(paths), dict(fields), batch_size, on_bad_record, bad, dict(sections or {}))


def _read_all(
    paths: list[str],
    fields: dict[str, str],
    batch_size: int,
    on_bad_record: str,
    bad: BadRecords,
    sections: dict[str, tuple[int, ...]],
) -> Generator[RecordBatch, None, None]:
    """The generator behind read_batches, kept apart so bad options fail at the call, not later."""

    def report(location: str, reason: str, problem: str) -> None:
        if on_bad_record == "fail":
            raise PackcliError(f"{location}: {problem}")
        bad.add(location, reason, problem)

    checks = [(name, kind, VALIDATORS[kind]) for name, kind in fields.items()]
    for path in paths:
        lowered = path.lower()
        if path == STDIN or lowered.endswith(JSONL_SUFFIXES):
            source = STDIN_NAME if path == STDIN else path
            builder = BatchBuilder(source, "line", fields, batch_size)
            yield from read_record_jsonl(path, checks, builder, report, bad, sections.get(path))
        elif lowered.endswith(JSON_SUFFIXES):
            yield from read_record_json(path, checks, BatchBuilder(path, "line", fields, batch_size), report, bad)
        elif lowered.endswith((".parquet", ".arrow")):
            # lazy: pyarrow, kept off runs that read no Parquet or Arrow
            from packcli.read.columnar import read_record_arrow, read_record_parquet

            builder = BatchBuilder(path, "row", fields, batch_size)
            if lowered.endswith(".parquet"):
                groups = sections.get(path)
                yield from read_record_parquet(
                    path, fields, builder, report, bad, None if groups is None else groups[:2]
                )
            else:
                yield from read_record_arrow(path, fields, builder, report, bad)
        else:
            raise PackcliError(f"{path}: unsupported file type (supported: {supported_list()})")
