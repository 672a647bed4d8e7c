"""Parquet `list<int32|int64>` columns decoded page by page, without Arrow's list assembly:
packcli's shards for `verify`, and the token-id columns of `--ids-field` input.

pyarrow turns each list page's repetition and definition levels into Arrow offsets and
validity one value at a time, and that is most of its cost on token lists
(docs/benchmarks/verify-2026-11-24.md, spill-2026-11-24.md). Here the levels give only
where each row starts and whether anything is null, found run by run by one Numba pass;
values are PLAIN (copied once out of the page) or indices into the chunk's dictionary
(looked up as they are read). Data pages v1 and v2, the codecs of CODECS. Any other
layout is left to pyarrow, decided from the file's metadata before a row is read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.arrow import arrow_array, int32_array
from packcli.core.flow import pooled_empty
from packcli.core.jit import kernel, njit

CODECS = {"UNCOMPRESSED": None, "ZSTD": "zstd", "SNAPPY": "snappy", "GZIP": "gzip"}
DATA_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 2, 3  # Thrift enum values: page types
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY = 0, 2, 3, 8  # and encodings
DTYPES: dict[str, np.dtype] = {"INT32": np.dtype("<i4"), "INT64": np.dtype("<i8")}
MAX_GROUP_BYTES = 1 << 28  # a row group decoded at once; bigger ones are streamed by pyarrow
BATCH_GROUP_BYTES = 1 << 26  # the same, for an input's row groups, read beside the rest of a run


class PageError(ValueError):
    """A page that does not decode: damaged bytes, or a layout the metadata did not show."""


@dataclass(frozen=True)
class Column:
    """One int32 column of a shard: flat values, and for a list column where each row starts."""

    values: np.ndarray  # int32
    offsets: np.ndarray | None  # int64 [rows + 1]; None for a plain int32 column

    @property
    def rows(self) -> np.ndarray:
        """Where each row starts, and the end: the offsets of a list column."""
        if self.offsets is None:
            raise ValueError("a plain column where packed rows hold lists")
        return self.offsets


def plain_layout(metadata: Any, columns: list[str], max_group_bytes: int = MAX_GROUP_BYTES) -> bool:
    """Whether every chunk of `columns` is laid out as this module reads: INT32 or INT64
    leaves, at most one level of lists, PLAIN or dictionary-encoded values, RLE levels, a
    known codec, row groups of at most `max_group_bytes` decoded."""
    schema = metadata.schema
    leaves = column_leaves(schema)
    if any(name not in leaves for name in columns):
        return False
    for name in columns:
        leaf = schema.column(leaves[name])
        if leaf.physical_type not in DTYPES or leaf.max_repetition_level > 1 or leaf.max_definition_level > 3:
            return False
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.total_byte_size > max_group_bytes:
            return False
        for name in columns:
            chunk = group.column(leaves[name])
            if chunk.compression not in CODECS:
                return False
            if not set(chunk.encodings) <= {"PLAIN", "RLE", "RLE_DICTIONARY", "PLAIN_DICTIONARY"}:
                return False
    return True


def id_list_batches(path: str, names: list[str], batch_rows: int, groups: range | None = None) -> Iterator[Any] | None:
    """Arrow record batches of the `list<int32|int64>` columns `names` of a local Parquet
    input, as `ParquetFile.iter_batches` would give them (`batch_rows` rows at most, row
    groups `groups` or all), decoded here; None when pyarrow must read it: another layout,
    row groups over BATCH_GROUP_BYTES, or statistics that do not rule out null or empty
    lists (those rows are reported one by one by the reader)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
        arrow = metadata.schema.to_arrow_schema()
    except Exception:
        return None
    for name in names:
        if name not in arrow.names or not pa.types.is_list(arrow.field(name).type):
            return None
        if arrow.field(name).type.value_type not in (pa.int32(), pa.int64()):
            return None
    if not plain_layout(metadata, names, BATCH_GROUP_BYTES):
        return None
    leaves = column_leaves(metadata.schema)
    for g in range(metadata.num_row_groups) if groups is None else groups:
        for name in names:
            stats = metadata.row_group(g).column(leaves[name]).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return None
    return _record_batches(path, metadata, names, batch_rows, groups)


def _record_batches(path: str, metadata: Any, names: list[str], batch_rows: int, groups: range | None) -> Iterator[Any]:
    import pyarrow as pa

    for rows, decoded in read_row_groups(path, metadata, names, groups):
        lists = [
            pa.ListArray.from_arrays(int32_array(decoded[name].rows), arrow_array(decoded[name].values))
            for name in names
        ]
        batch = pa.RecordBatch.from_arrays(lists, names=names)
        for start in range(0, rows, batch_rows):
            yield batch.slice(start, batch_rows)


def read_row_groups(
    path: Path | str, metadata: Any, columns: list[str], groups: range | None = None
) -> Iterator[tuple[int, dict[str, Column]]]:
    """(rows, {name: Column}) per row group (those of `groups`, or all) of a file whose
    metadata `plain_layout` accepted. A page that does not decode is a PageError."""
    schema = metadata.schema
    leaves = column_leaves(schema)
    chunk_bytes = bytearray()
    with open(path, "rb", buffering=0) as f:
        try:
            for g in range(metadata.num_row_groups) if groups is None else groups:
                group = metadata.row_group(g)
                decoded = {}
                for name in columns:
                    chunk, leaf = group.column(leaves[name]), schema.column(leaves[name])
                    size = chunk.total_compressed_size
                    if len(chunk_bytes) < size:
                        chunk_bytes = bytearray(size)
                    raw = memoryview(chunk_bytes)[:size]
                    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                    if os.preadv(f.fileno(), [raw], first) != size:
                        raise ValueError(f"column {name} runs past the end of the file")
                    out = pooled_empty(chunk.num_values, DTYPES[leaf.physical_type])
                    decoded[name] = _read_chunk(np.frombuffer(raw, dtype=np.uint8), chunk, leaf, out)
                    offsets = decoded[name].offsets
                    rows = group.num_rows if offsets is None else len(offsets) - 1
                    if rows != group.num_rows:
                        raise ValueError(f"{name} holds {rows} rows in a row group of {group.num_rows}")
                yield group.num_rows, decoded
        except PageError:
            raise
        except Exception as exc:  # damaged bytes can fail anywhere in a page
            raise PageError(str(exc)) from exc


def column_leaves(schema: Any) -> dict[str, int]:
    """Top-level column name -> index of its leaf (one leaf each in packcli's shards)."""
    return {schema.column(j).path.split(".")[0]: j for j in range(len(schema))}


def _read_chunk(data: np.ndarray, chunk: Any, leaf: Any, out: np.ndarray) -> Column:
    """One column chunk's pages (its dictionary page first, if any), their values gathered
    into `out`."""
    import pyarrow as pa

    codec = CODECS[chunk.compression]
    decompress = pa.Codec(codec).decompress if codec else None
    pages = Pages(leaf.max_repetition_level, leaf.max_definition_level, out.dtype, decompress)
    starts: list[np.ndarray] = []  # where each row starts, page by page
    pos = seen = 0
    while seen < chunk.num_values:
        header, pos = read_struct(data, pos, {5: {}, 7: {}, 8: {}})
        size = header.get(3, -1)
        if not 0 <= size <= len(data) - pos:
            raise ValueError(f"page of {size} bytes runs past column {leaf.path}")
        count = header.get(5, header.get(8, header.get(7, {}))).get(1, -1)
        if not 0 <= count <= chunk.num_values or not 0 <= header.get(2, -1) <= 8 * count + 1024:
            raise ValueError(f"page of {count} values and {header.get(2)} bytes in column {leaf.path}")
        page = data[pos : pos + size]
        pos += size
        if header.get(1) == DICTIONARY_PAGE:
            pages.dictionary_page(header[7], page, header[2])
            continue
        if count > chunk.num_values - seen:
            raise ValueError(f"column {leaf.path} holds more values than its metadata says")
        if header.get(1) == DATA_PAGE:
            page_starts = pages.page_v1(header[5], page, header[2], out[seen : seen + count])
        elif header.get(1) == DATA_PAGE_V2:
            page_starts = pages.page_v2(header[8], page, header[2], out[seen : seen + count])
        else:
            raise ValueError(f"page of type {header.get(1)} in column {leaf.path}, not a data page")
        if page_starts is not None:
            starts.append(page_starts + seen)
        seen += count
    if pages.max_rep == 0:
        return Column(out[:seen], None)
    offsets = np.concatenate([*starts, np.array([seen], dtype=np.int64)])
    if len(offsets) == 1 or offsets[0] != 0:
        raise ValueError(f"column {leaf.path} does not start a row at its first value")
    return Column(out[:seen], offsets)


class Pages:
    """The data pages of one column chunk, read into slices of its values: their levels
    give where each row starts (None for a column of plain values); their values are PLAIN
    or indices into the chunk's dictionary page."""

    def __init__(self, max_rep: int, max_def: int, dtype: np.dtype, decompress: Any):
        self.max_rep, self.max_def, self.dtype, self.decompress = max_rep, max_def, dtype, decompress
        self.dictionary: np.ndarray | None = None

    def dictionary_page(self, header: dict, page: np.ndarray, full_size: int) -> None:
        if header.get(2) not in (PLAIN, PLAIN_DICTIONARY):
            raise ValueError("a dictionary page not of PLAIN values")
        page = self._decompressed(page, full_size)
        count = header.get(1, -1)
        if not 0 <= count * self.dtype.itemsize <= len(page):
            raise ValueError("dictionary page shorter than its values")
        self.dictionary = page[: count * self.dtype.itemsize].copy().view(self.dtype)

    def page_v1(self, header: dict, page: np.ndarray, full_size: int, out: np.ndarray) -> np.ndarray | None:
        """Levels and values all compressed; each level run prefixed by its byte length."""
        self._check_levels(header.get(4), header.get(3))
        page = self._decompressed(page, full_size)
        pos, runs = 0, []
        for present in (self.max_rep, self.max_def):
            if present:
                if len(page) < pos + 4:
                    raise ValueError("page shorter than its levels")
                length = int(page[pos : pos + 4].view("<u4")[0])
                runs.append((pos + 4, pos + 4 + length))
                pos += 4 + length
            else:
                runs.append((pos, pos))
        starts = self._starts_checking_nulls(page, len(out), *runs)
        self._values(header.get(2), page[pos:], out)
        return starts

    def page_v2(self, header: dict, page: np.ndarray, full_size: int, out: np.ndarray) -> np.ndarray | None:
        """Levels uncompressed, unprefixed, before the (maybe compressed) values."""
        self._check_levels(RLE, RLE)
        rep_bytes, def_bytes = header.get(6, 0), header.get(5, 0)
        pos = rep_bytes + def_bytes
        if rep_bytes < 0 or def_bytes < 0 or pos > len(page):
            raise ValueError("levels run past their page")
        starts = self._starts_checking_nulls(page, len(out), (0, rep_bytes), (rep_bytes, pos))
        values = page[pos:]
        if header.get(7, True):
            values = self._decompressed(values, full_size - pos)
        self._values(header.get(4), values, out)
        return starts

    def _decompressed(self, page: np.ndarray, full_size: int) -> np.ndarray:
        if self.decompress is None:
            return page
        return np.frombuffer(self.decompress(page, decompressed_size=full_size), dtype=np.uint8)

    def _check_levels(self, repetition: int | None, definition: int | None) -> None:
        if (self.max_rep and repetition != RLE) or (self.max_def and definition != RLE):
            raise ValueError("a data page whose levels are not RLE")

    def _starts_checking_nulls(
        self, page: np.ndarray, count: int, rep: tuple[int, int], defs: tuple[int, int]
    ) -> np.ndarray | None:
        if self.max_def:
            nulls = level_positions(page, defs[0], defs[1], self.max_def.bit_length(), count, self.max_def, False)
            if len(nulls):
                raise ValueError("null or empty list where every row holds values")
        if not self.max_rep:
            return None
        return level_positions(page, rep[0], rep[1], self.max_rep.bit_length(), count, 0, True)

    def _values(self, encoding: int | None, values: np.ndarray, out: np.ndarray) -> None:
        """`out` filled from a page's values part (bytes)."""
        if encoding == PLAIN:
            size = len(out) * self.dtype.itemsize
            if len(values) < size:
                raise ValueError("page shorter than its values")
            out.view(np.uint8)[:] = values[:size]  # bytes: a page's values need not be aligned
        elif encoding in (PLAIN_DICTIONARY, RLE_DICTIONARY) and self.dictionary is not None and len(values):
            dictionary_values(values, 1, len(values), int(values[0]), self.dictionary, out)
        else:
            raise ValueError(f"values of encoding {encoding} (PLAIN or a dictionary's indices expected)")


def dictionary_values(
    buf: np.ndarray, start: int, stop: int, bit_width: int, dictionary: np.ndarray, out: np.ndarray
) -> None:
    """`out` filled with the dictionary's values at the indices that Parquet's RLE/bit-packed
    hybrid runs of `bit_width` (0-32) bits in buf[start:stop] hold."""
    if not 0 <= bit_width <= 32 or buf.dtype != np.uint8 or out.dtype != dictionary.dtype:
        raise ValueError(f"dictionary indices of {bit_width} bits")
    if not 0 <= start <= stop <= len(buf):
        raise ValueError("dictionary indices outside the page")
    written = kernel(_dictionary_values, len(out))(buf, start, stop, bit_width, dictionary, out)
    if written == -2:
        raise ValueError(f"a dictionary index past the dictionary's {len(dictionary)} values")
    if written != len(out):
        raise ValueError(f"{max(written, 0)} dictionary indices where the page has {len(out)} values")


@njit(cache=True, nogil=True)
def _run_header(buf, pos, stop):  # pragma: no cover - compiled; tests run its twin
    """A hybrid run's ULEB128 header at `pos`: (header, the position after it); -1 past `stop`."""
    header = 0
    shift = 0
    while pos < stop:
        b = int(buf[pos])  # a numpy uint8 would overflow the shift when interpreted
        pos += 1
        header |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return header, pos
    return -1, pos


@njit(cache=True, nogil=True)
def _dictionary_values(buf, pos, stop, bit_width, dictionary, out):  # pragma: no cover - compiled; tests run its twin
    count = len(out)
    size = len(dictionary)
    n = 0
    while n < count and pos < stop:
        header, pos = _run_header(buf, pos, stop)
        if header < 0:
            return -1
        if header & 1 == 0:  # a run of one index, in whole bytes
            width = (bit_width + 7) >> 3
            if pos + width > stop:
                return -1
            index = 0
            for k in range(width):
                index |= int(buf[pos + k]) << (8 * k)
            pos += width
            if index >= size:
                return -2
            end = min(count, n + (header >> 1))
            out[n:end] = dictionary[index]
            n = end
        else:  # groups of 8 indices, bit_width bits each, least significant bit first
            groups = header >> 1
            if pos + groups * bit_width > stop:
                return -1
            take = min(groups * 8, count - n)
            fast = take  # indices whose five bytes lie inside the page
            while fast > 0 and pos + (((fast - 1) * bit_width) >> 3) + 5 > stop:
                fast -= 1
            if _unpack(buf, pos, bit_width, 0, fast, dictionary, out[n : n + fast]) != fast:
                return -2
            for j in range(fast, take):  # the page's last bytes
                at = pos + ((j * bit_width) >> 3)
                word = 0
                for k in range(stop - at):
                    word |= int(buf[at + k]) << (8 * k)
                index = (word >> ((j * bit_width) & 7)) & ((1 << bit_width) - 1)
                if index >= size:
                    return -2
                out[n + j] = dictionary[index]
            n += take
            pos += groups * bit_width
    return n


def level_positions(
    buf: np.ndarray, start: int, stop: int, bit_width: int, count: int, level: int, equal: bool
) -> np.ndarray:
    """Positions, among the first `count` levels that Parquet's RLE/bit-packed hybrid runs of
    `bit_width` (1-8) bits in buf[start:stop] hold, of those equal (or, `equal` False, not
    equal) to `level`: the row starts of repetition levels, the nulls of definition levels,
    found run by run without writing out every level."""
    if not 1 <= bit_width <= 8 or buf.dtype != np.uint8:
        raise ValueError("levels of 1 to 8 bits in a uint8 buffer")
    if not 0 <= start <= stop <= len(buf):
        raise ValueError("level range outside the page")
    found = np.empty(count, dtype=np.int64)
    decoded, n_found = kernel(_level_positions, count)(buf, start, stop, bit_width, count, level, equal, found)
    if decoded != count:
        raise ValueError(f"{decoded} levels where the page has {count}")
    return found[:n_found]


@njit(cache=True, nogil=True)
def _level_positions(
    buf, pos, stop, bit_width, count, level, equal, found
):  # pragma: no cover - compiled; tests run its twin
    mask = (1 << bit_width) - 1
    n = 0
    n_found = 0
    while n < count and pos < stop:
        header, pos = _run_header(buf, pos, stop)
        if header < 0:
            return -1, n_found
        if header & 1 == 0:  # a run of one value
            if pos >= stop:
                return -1, n_found
            end = min(count, n + (header >> 1))
            if ((buf[pos] & mask) == level) == equal:
                for i in range(n, end):
                    found[n_found] = i
                    n_found += 1
            pos += 1
            n = end
        else:  # groups of 8 values, bit_width bits each, least significant bit first
            groups = header >> 1
            if pos + groups * bit_width > stop:
                return -1, n_found
            bit = 0
            for _ in range(groups * 8):
                if n >= count:
                    break
                at = pos + (bit >> 3)
                shift = bit & 7
                value = int(buf[at]) >> shift
                if shift + bit_width > 8:
                    value |= int(buf[at + 1]) << (8 - shift)
                if ((value & mask) == level) == equal:
                    found[n_found] = n
                    n_found += 1
                n += 1
                bit += bit_width
            pos += groups * bit_width
    return n, n_found


@njit(cache=True, nogil=True)
def _unpack(buf, pos, bit_width, first, stop, dictionary, out):  # pragma: no cover - compiled; tests run its twin
    """out[j] = dictionary[index j] for the indices first..stop of a bit-packed run at `pos`,
    each read from five bytes; the number written, or where an index is out of range.
    Unsigned arithmetic: numba then indexes without checking for negative indices (3x faster)."""
    width, base, low, mask = np.uint64(bit_width), np.uint64(pos), np.uint64(7), np.uint64((1 << bit_width) - 1)
    size = np.uint64(len(dictionary))
    for j in range(first, stop):
        bit = np.uint64(j) * width
        at = base + (bit >> np.uint64(3))
        word = np.uint64(0)
        for k in range(5):
            word |= np.uint64(buf[at + np.uint64(k)]) << np.uint64(8 * k)
        index = (word >> (bit & low)) & mask
        if index >= size:
            return j
        out[j - first] = dictionary[index]
    return stop


def read_struct(buf: Any, pos: int, nested: dict) -> tuple[dict, int]:
    """The integer and boolean fields of a Thrift compact-protocol struct at `pos`, by field
    id, with the structs whose ids `nested` names read the same way (its values: their own
    `nested`); other fields are skipped. Returns (fields, the position after the struct)."""
    fields: dict[int, Any] = {}
    field = 0
    while True:
        head = int(buf[pos])
        pos += 1
        if head == 0:
            return fields, pos
        kind, delta = head & 15, head >> 4
        if delta:
            field += delta
        else:
            raw, pos = _varint(buf, pos)
            field = _zigzag(raw)
        if kind in (4, 5, 6):
            raw, pos = _varint(buf, pos)
            fields[field] = _zigzag(raw)
        elif kind in (1, 2):
            fields[field] = kind == 1
        elif kind == 12 and field in nested:
            fields[field], pos = read_struct(buf, pos, nested[field])
        else:
            pos = _skip(buf, pos, kind)


def _skip(buf: Any, pos: int, kind: int) -> int:
    if kind in (1, 2):
        return pos
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):
        return _varint(buf, pos)[1]
    if kind == 7:
        return pos + 8
    if kind == 8:
        size, pos = _varint(buf, pos)
        return pos + size
    if kind in (9, 10):
        head = int(buf[pos])
        pos += 1
        size, element = head >> 4, head & 15
        if size == 15:
            size, pos = _varint(buf, pos)
        for _ in range(size):
            pos = _skip(buf, pos, element)
        return pos
    if kind == 12:
        return read_struct(buf, pos, {})[1]
    raise ValueError(f"Thrift field of type {kind} in a page header")


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = int(buf[pos])
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)
