"""Parquet and Arrow IPC records (Arrow is what `datasets.save_to_disk` writes), one columnar
path for both: columns checked once, rows validated as JSON records are, ids kept flat."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.read.checks import INT64_MAX, OPTIONAL_KINDS, VALIDATORS, RecordProblem, Validator, key_list, one_line
from packcli.read.records import (
    BATCH_BUDGET,
    BadRecords,
    BatchBuilder,
    IdLists,
    RecordBatch,
    Report,
    format_location,
    slice_rows,
)


def _is_string_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _has_string_fields(struct: pa.StructType, names: tuple[str, str]) -> bool:
    present = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
    return all(name in present and _is_string_type(present[name]) for name in names)


def _column_type_ok(t: pa.DataType, kind: str) -> bool:
    if kind == "text":
        return _is_string_type(t)
    if kind == "ids":
        return _is_list_type(t) and pa.types.is_integer(t.value_type)
    if kind == "messages":
        if not (_is_list_type(t) and pa.types.is_struct(t.value_type)):
            return False
        return _has_string_fields(t.value_type, ("role", "content")) or _has_string_fields(
            t.value_type, ("from", "value")
        )
    if kind == "text_or_messages":
        return _column_type_ok(t, "text") or _column_type_ok(t, "messages")
    if kind in ("weight", "weight_or_absent"):
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
    return True


_EXPECTED_COLUMN_TYPE = {
    "text": "a string",
    "ids": "a list of integers",
    "messages": "a list of structs with string 'role' and 'content' (or 'from' and 'value')",
    "text_or_messages": "a string, or a list of structs with string 'role' and 'content'",
    "weight": "a number",
    "weight_or_absent": "a number",
}


def present_fields(schema: pa.Schema, fields: Mapping[str, str]) -> dict[str, str]:
    """The fields a file's columns hold: all of them, but an optional kind's column may be
    absent (each of its values is then None)."""
    return {name: kind for name, kind in fields.items() if kind not in OPTIONAL_KINDS or name in schema.names}


def _check_columns(path: str, schema: pa.Schema, fields: Mapping[str, str]) -> None:
    """Column problems affect every row, so they are fatal whatever --on-bad-record says."""
    for name, kind in present_fields(schema, fields).items():
        index = schema.get_field_index(name)
        if index < 0:
            raise PackcliError(f"{path}: no column {name!r} (columns: {key_list(schema.names)})")
        column_type = schema.field(index).type
        if not _column_type_ok(column_type, kind):
            expected = _EXPECTED_COLUMN_TYPE[kind]
            raise PackcliError(f"{path}: column {name!r} has type {one_line(column_type)}, expected {expected}")


def _checked(validate: Validator, value: Any, name: str) -> Any:
    try:
        return validate(value, name)
    except RecordProblem as b:
        return b


def _python_values(column: pa.Array) -> list[Any]:
    """Arrow happily stores invalid UTF-8 in a string column; find out row by row which."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        values = []
        for i in range(len(column)):
            try:
                values.append(column[i].as_py())
            except UnicodeDecodeError as e:
                values.append(RecordProblem("invalid UTF-8", f"invalid UTF-8 (byte 0x{e.object[e.start]:02x})"))
        return values


def _without_absent_keys(conversation: Any) -> Any:
    """A struct column with both role/content and from/value fields (ShareGPT and OpenAI
    turns in one table) holds nulls where a JSON object would have no such key: drop the
    null fields of the shape a turn does not use."""
    if type(conversation) is not list:
        return conversation
    out = []
    for m in conversation:
        if type(m) is dict:
            unused = ("role", "content") if m.get("role") is None and m.get("from") is not None else ("from", "value")
            m = {k: v for k, v in m.items() if not (k in unused and v is None)}
        out.append(m)
    return out


def _column_values(column: pa.Array, name: str, kind: str) -> list[Any]:
    """One value per row, or the row's RecordProblem: the validators of JSON records, row by row."""
    validate = VALIDATORS[kind]
    values = _python_values(column)
    if kind in ("messages", "text_or_messages") and _is_list_type(column.type):
        struct = column.type.value_type
        if struct.get_field_index("role") >= 0 and struct.get_field_index("from") >= 0:
            values = [v if isinstance(v, RecordProblem) else _without_absent_keys(v) for v in values]
    return [v if isinstance(v, RecordProblem) else _checked(validate, v, name) for v in values]


def _arrow_id_lists(column: pa.Array, name: str) -> tuple[IdLists, dict[int, RecordProblem]]:
    """A list<int> column's ids straight from Arrow buffers to one flat array in the column's
    integer type (sliced arrays and nulls allowed), and the rows that cannot be used, by row,
    with the problem the JSON path would name for them."""

    if pa.types.is_fixed_size_list(column.type):
        column = column.cast(pa.list_(column.type.value_type))
    offsets = _buffer_view(column.offsets).astype(np.int64)
    low, high = int(offsets[0]), int(offsets[-1])
    flat = column.values.slice(low, high - low)
    offsets -= low
    problems: dict[int, RecordProblem] = {}
    if column.null_count:
        for row in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
            problems[int(row)] = RecordProblem("wrong type", f"field {name!r} is null")
    for row in np.flatnonzero(offsets[1:] == offsets[:-1]):
        problems.setdefault(int(row), RecordProblem("empty field", f"field {name!r} is an empty list"))
    numbers = _buffer_view(flat.fill_null(0)) if flat.null_count else _buffer_view(flat)
    null_items = flat.is_null().to_numpy(zero_copy_only=False) if flat.null_count else None
    huge = numbers > INT64_MAX if numbers.dtype == np.uint64 else None
    for mask, problem in ((null_items, "is null"), (huge, "does not fit in int64")):
        if mask is None or not mask.any():
            continue
        where = np.flatnonzero(mask)
        rows = np.searchsorted(offsets, where, side="right") - 1
        rows, first = np.unique(rows, return_index=True)
        for row, at in zip(rows.tolist(), where[first].tolist()):
            problems.setdefault(row, RecordProblem("wrong type", f"field {name!r} item {at - offsets[row]} {problem}"))
    return IdLists(numbers.astype(np.int64) if numbers.dtype == np.uint64 else numbers, offsets), problems


def _buffer_view(array: pa.Array) -> np.ndarray:
    """An integer Arrow array without nulls as a read-only NumPy view of its data buffer.
    (`Array.to_numpy` does the same, but its first call imports pandas: most of a second.)"""
    dtype = np.dtype(str(array.type))
    if len(array) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def _columnar_rows(
    batch: pa.RecordBatch, fields: Mapping[str, str], builder: BatchBuilder, report: Report, first_row: int
) -> Iterator[RecordBatch]:
    """The good rows of one Arrow record batch, in runs between the bad ones; a row's problem
    is that of its first field (in `fields` order) that has one."""
    columns: dict[str, Any] = {}
    problems: dict[int, RecordProblem] = {}
    for name, kind in fields.items():
        if name not in batch.schema.names and kind in OPTIONAL_KINDS:
            columns[name] = [None] * batch.num_rows
            continue
        if kind == "ids":
            columns[name], found = _arrow_id_lists(batch.column(name), name)
        else:
            columns[name] = _column_values(batch.column(name), name, kind)
            found = {i: v for i, v in enumerate(columns[name]) if isinstance(v, RecordProblem)}
        for row, problem in found.items():
            problems.setdefault(row, problem)
    start = 0
    for row in [*sorted(problems), batch.num_rows]:
        if row > start:
            positions = np.arange(first_row + start, first_row + row, dtype=np.int64)
            yield from builder.extend(positions, {name: slice_rows(c, start, row) for name, c in columns.items()})
        if row < batch.num_rows:
            problem = problems[row]
            report(format_location(builder.source, "row", first_row + row), problem.reason, problem.problem)
        start = row + 1


def _read_columnar(
    path: str,
    label: str,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    fields: Mapping[str, str],
    builder: BatchBuilder,
    report: Report,
    bad: BadRecords,
    first_row: int = 0,
) -> Iterator[RecordBatch]:
    """Parquet and Arrow alike: Arrow record batches of at most batch_size rows; rows are
    numbered from `first_row` (a part of a file starts where its first row group does)."""
    _check_columns(path, schema, fields)
    row = first_row
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: parquet_pages.PageError
            raise PackcliError(f"{path}: cannot read {label} file near row {row} ({one_line(e)})") from None
        bad.records_seen += batch.num_rows
        yield from _columnar_rows(batch, fields, builder, report, row)
        row += batch.num_rows
    yield from builder.rest()


def read_record_parquet(
    path: str,
    fields: Mapping[str, str],
    builder: BatchBuilder,
    report: Report,
    bad: BadRecords,
    groups: tuple[int, ...] | None = None,
) -> Iterator[RecordBatch]:
    """The whole file, or row groups [lo, hi) of it (`groups`, a part of the file)."""
    try:  # pre-buffering keeps every row group read: memory would grow with the file
        source = storage.open_input(path) if storage.is_remote(path) else path
        parquet = pq.ParquetFile(source, pre_buffer=False)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError) or not storage.exists(path):
            raise PackcliError(f"{path}: cannot open (No such file or directory)") from None
        if storage.size(path) == 0:
            return  # an empty file simply holds no records
        raise PackcliError(f"{path}: cannot read Parquet file ({one_line(e)})") from None
    try:
        size, total_rows = storage.size(path), max(1, parquet.metadata.num_rows)
        rows = _parquet_batch_rows(parquet, builder.batch_size)
        first_row = 0
        part = None if groups is None else range(groups[0], groups[1])
        if part is not None:
            first_row = sum(parquet.metadata.row_group(i).num_rows for i in range(part.start))
        batches = _id_batches(path, fields, rows, part)
        if batches is None:
            columns = list(present_fields(parquet.schema_arrow, fields))
            batches = parquet.iter_batches(batch_size=rows, columns=columns, row_groups=part)
        done = [0]

        def counted() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield batch
                done[0] += batch.num_rows

        builder.consumed = lambda: size * done[0] // total_rows
        schema = parquet.schema_arrow
        yield from _read_columnar(path, "Parquet", schema, counted(), fields, builder, report, bad, first_row)
    finally:
        close = getattr(parquet, "close", None)
        if close is not None:
            close()


def _id_batches(path: str, fields: Mapping[str, str], rows: int, part: range | None) -> Iterator[pa.RecordBatch] | None:
    """Columns of token ids only, from a local file: decoded page by page, about three times
    faster than pyarrow's list assembly (docs/benchmarks/spill-2026-11-24.md); None when
    pyarrow reads them."""
    if storage.is_remote(path) or any(kind != "ids" for kind in fields.values()):
        return None
    from packcli.read.parquet_pages import id_list_batches

    return id_list_batches(path, list(fields), rows, part)


def _parquet_batch_rows(parquet: pq.ParquetFile, batch_size: int) -> int:
    """Rows per Arrow batch, so that long documents do not make a batch of hundreds of MB."""
    meta = parquet.metadata
    if meta.num_rows == 0:
        return batch_size
    row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / meta.num_rows
    return int(max(1, min(batch_size, 4 * BATCH_BUDGET // max(row_bytes, 1))))


def read_record_arrow(
    path: str, fields: Mapping[str, str], builder: BatchBuilder, report: Report, bad: BadRecords
) -> Iterator[RecordBatch]:
    """Arrow IPC, the stream format `datasets.save_to_disk` writes or the file format, memory-mapped."""
    try:
        size = storage.size(path)
        if storage.is_remote(path):
            source = pa.PythonFile(storage.open_input(path), mode="r") if size else None
        else:
            source = pa.memory_map(path) if size else None
    except (pa.ArrowException, OSError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else one_line(e)
        raise PackcliError(f"{path}: cannot open ({reason})") from None
    if source is None:
        return  # an empty file simply holds no records
    with source:
        try:
            is_file_format = source.read(6) == b"ARROW1"
            source.seek(0)
            reader = pa.ipc.open_file(source) if is_file_format else pa.ipc.open_stream(source)
        except (pa.ArrowException, OSError) as e:
            raise PackcliError(f"{path}: cannot read Arrow file ({one_line(e)})") from None
        done = [0]
        if is_file_format:
            whole = (reader.get_batch(i) for i in range(reader.num_record_batches))
            builder.consumed = lambda: size * done[0] // max(1, reader.num_record_batches)
        else:
            whole = iter(reader)
            builder.consumed = source.tell
        batches = _sliced(whole, builder.batch_size, done)
        yield from _read_columnar(path, "Arrow", reader.schema, batches, fields, builder, report, bad)


def _sliced(batches: Iterator[pa.RecordBatch], size: int, done: list[int] | None) -> Iterator[pa.RecordBatch]:
    """Record batches cut to at most `size` rows (zero-copy), so no batch is turned into
    Python objects whole, however large the writer made it."""
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            yield batch.slice(start, size)
        if done is not None:
            done[0] += 1
