"""The real tokens of a packed output, for the exports that write one flat token stream
(megatron, nanotron): only the columns they need, a bounded chunk at a time.

An npy shard's rows are taken a chunk of about 2 MB at a time: on Linux as a mapping of
just those rows' pages, all read in by the one `mmap` call (MAP_POPULATE), elsewhere read
with `pread` into one reused buffer. Memory-mapping every column of a shard and faulting
its pages in one at a time cost more than the copy itself. The real tokens of the rows go
out with `writev`. Parquet shards decode only the columns asked for. The segment
arithmetic is done for a whole block of rows at once.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.export.base import Progress, write_views
from packcli.write.columns import NPY_HEADER_BYTES, READ_BLOCK_ROWS
from packcli.write.manifest import Manifest

CHUNK_BYTES = 1 << 21  # rows read and written at a time: a few hundred KB to 2 MB stay in cache
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: a chunk's rows mapped and read in by one call
FIXED_COLUMNS = ("input_ids", "labels")
# the header packcli's npy writer gives every file: version 1.0, padded to NPY_HEADER_BYTES
NPY_HEADER = re.compile(
    rb"\x93NUMPY\x01\x00"
    + re.escape((NPY_HEADER_BYTES - 10).to_bytes(2, "little"))
    + rb"\{'descr': '([<>|][a-z]\d+)', 'fortran_order': False, "
    rb"'shape': \((\d+),(?: (\d+))?\), \} *\n",
    re.DOTALL,
)
HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@dataclass
class Segments:
    """The real segments of a block of rows, in order."""

    real: np.ndarray  # int64 per row: its count of real tokens (with pads after segments, not where they end)
    lengths: np.ndarray  # int64 per segment: real tokens
    starts_row: np.ndarray  # bool per segment: the first of its row
    first_segment: np.ndarray  # int64 per row + 1: index of each row's first segment
    starts: np.ndarray | None  # int64 per segment: where it starts in its row, when pads follow segments


@dataclass
class Chunk:
    """Rows `start` to `start + len(ids)` of a block. The arrays may be a reused buffer:
    valid until the next chunk is read."""

    start: int
    ids: np.ndarray  # [rows, seq_len], the stored dtype
    labels: np.ndarray | None  # [rows, seq_len], when asked for


class TokenBlock:
    """A block of rows: where it sits, its segments, and its columns chunk by chunk."""

    def __init__(self, shard: int, first_row: int, segments: Segments, chunks: Iterator[Chunk]):
        self.shard, self.first_row, self.segments = shard, first_row, segments
        self._chunks = chunks

    def __len__(self) -> int:
        return len(self.segments.real)

    def chunks(self) -> Iterator[Chunk]:
        return self._chunks

    def write(self, fd: int, chunk: Chunk, values: np.ndarray) -> None:
        """The real tokens of `values` (the chunk's rows, C-ordered) to the file `fd`, in
        order: each row's prefix, or each segment's real part where pads follow segments."""
        segments, size = self.segments, values.itemsize
        stop = chunk.start + len(values)
        if segments.starts is None:
            begins = np.arange(len(values), dtype=np.int64) * (values.shape[1] * size)
            ends = begins + segments.real[chunk.start : stop] * size
        else:
            lo, hi = int(segments.first_segment[chunk.start]), int(segments.first_segment[stop])
            rows = np.repeat(np.arange(len(values)), np.diff(segments.first_segment[chunk.start : stop + 1]))
            begins = (rows * values.shape[1] + segments.starts[lo:hi]) * size
            ends = begins + segments.lengths[lo:hi] * size
        write_spans(fd, values.data.cast("B"), begins, ends)

    def real_mask(self, chunk: Chunk) -> np.ndarray:
        """True where the chunk's rows hold a real token ([rows, seq_len]): each row's prefix,
        or each segment's real part where pads follow segments (what `write` writes)."""
        segments, (n, width) = self.segments, chunk.ids.shape
        stop = chunk.start + n
        if segments.starts is None:
            mask: np.ndarray = np.arange(width)[None, :] < segments.real[chunk.start : stop, None]
            return mask
        lo, hi = int(segments.first_segment[chunk.start]), int(segments.first_segment[stop])
        rows = np.repeat(np.arange(n), np.diff(segments.first_segment[chunk.start : stop + 1]))
        begins = rows * width + segments.starts[lo:hi]
        edges = np.bincount(begins, minlength=n * width + 1) - np.bincount(
            begins + segments.lengths[lo:hi], minlength=n * width + 1
        )
        return (np.cumsum(edges[:-1]) > 0).reshape(n, width)


def write_spans(fd: int, data: memoryview, begins: np.ndarray, ends: np.ndarray) -> None:
    """`data[begins[i]:ends[i]]` for every i, in order, to the file `fd` in a few `writev`
    calls: the kernel gathers them, so the bytes are copied once, into the file. Spans that
    touch are written as one (a full row and the next row's prefix): fewer, longer copies."""
    if len(begins) > 1:
        apart = np.flatnonzero(begins[1:] != ends[:-1])
        begins, ends = begins[np.concatenate([[0], apart + 1])], ends[np.append(apart, len(ends) - 1)]
    write_views(fd, [data[b:e] for b, e in zip(begins.tolist(), ends.tolist(), strict=True)])


def segments_of(
    cu: np.ndarray, offsets: np.ndarray, counts: np.ndarray, unpadded: np.ndarray | None, first_row: int
) -> Segments:
    """The real segments of rows given by their cu_seqlens (CSR: values `cu`, row `offsets`
    from 0), real segment `counts`, and cu_seqlens_unpadded (with --pad-to-multiple-of)."""
    counts = counts.astype(np.int64)
    if len(counts) and counts.min() < 1:
        bad = first_row + int(np.argmax(counts < 1))
        raise PackcliError(f"row {bad} has no real segment: check the output with packcli verify")
    first_segment = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=first_segment[1:])
    row_starts = offsets[:-1].astype(np.int64)
    # segment k of row r is entry row_starts[r] + k; the real ones are k < counts[r]
    index = np.arange(first_segment[-1], dtype=np.int64) + np.repeat(row_starts - first_segment[:-1], counts)
    ends = cu if unpadded is None else unpadded
    lengths = (ends[index + 1] - ends[index]).astype(np.int64)
    starts_row = np.zeros(len(lengths), dtype=bool)
    starts_row[first_segment[:-1]] = True
    real = ends[row_starts + counts].astype(np.int64)
    starts = None if unpadded is None else cu[index].astype(np.int64)
    return Segments(real, lengths, starts_row, first_segment, starts)


def token_blocks(
    out_dir: Path | str, manifest: Manifest, *, labels: bool = False, progress: Progress | None = None
) -> Iterator[TokenBlock]:
    """Every block of rows of a packed output, in order; each block's chunks must be read
    before the next block is asked for."""
    total = manifest.get("totals", {}).get("rows")
    seq_len, fmt = manifest["seq_len"], manifest["format"]
    buffers: dict[Any, np.ndarray] = {}
    done = 0
    for index, entry in enumerate(manifest["shards"]):
        path = Path(out_dir) / entry["path"]
        if not path.exists():
            raise PackcliError(f"{entry['path']}: listed in the manifest but missing")
        shard = _NpyShard(path, seq_len, labels, buffers) if fmt == "npy" else _ParquetShard(path, seq_len, labels)
        try:
            for block in shard.blocks(index, done):
                yield block
                done += len(block)
                if progress is not None:
                    progress(len(block), int(block.segments.real.sum()), done, total)
        finally:
            shard.close()


@contextmanager
def _shard_errors(path: Path) -> Iterator[None]:
    """Damage met while reading a shard, as one line naming it."""
    try:
        yield
    except PackcliError:
        raise
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PackcliError(f"{path.name}: cannot read shard ({text})") from exc


class _NpyColumn:
    """One .npy file: its header parsed once, then read by rows with `pread`."""

    def __init__(self, path: Path):
        self.file = open(path, "rb")  # closed by the shard, or here when the header is bad
        try:
            self._read_header(path)
        except BaseException:
            self.file.close()
            raise

    def _read_header(self, path: Path) -> None:
        head = os.pread(self.file.fileno(), NPY_HEADER_BYTES, 0)
        plain = NPY_HEADER.fullmatch(head)  # packcli's own header, without numpy's parser
        if plain:
            rows, width = int(plain[2]), plain[3]
            shape: tuple[int, ...] = (rows,) if width is None else (rows, int(width))
            dtype, self.data = np.dtype(plain[1].decode()), NPY_HEADER_BYTES
        else:
            shape, dtype = self._numpy_header(path)
            self.data = self.file.tell()
        self.shape, self.dtype, self.size = shape, dtype, os.fstat(self.file.fileno()).st_size
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize

    def _numpy_header(self, path: Path) -> tuple[tuple[int, ...], np.dtype]:
        version = np.lib.format.read_magic(self.file)
        if version not in HEADER_READERS:
            raise PackcliError(f"{path.parent.name}: {path.name} has npy format {version}, not 1.0 or 2.0")
        shape, fortran, dtype = HEADER_READERS[version](self.file)
        if fortran or dtype.hasobject:
            raise PackcliError(f"{path.parent.name}: {path.name} is not a C-ordered numeric array")
        return shape, dtype

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty((stop - start, *self.shape[1:]), dtype=self.dtype)
        view = out.data.cast("B")
        offset = self.data + start * self.row_bytes
        while view.nbytes:
            got = os.preadv(self.file.fileno(), [view], offset)
            if got == 0:
                self._truncated()
            view, offset = view[got:], offset + got
        return out

    def mapped(self, start: int, stop: int) -> np.ndarray:
        """Rows `start` to `stop` (some) as a read-only view of a mapping of their pages only,
        all read in by the call (MAP_POPULATE): no page faults, one copy when written out."""
        begin = self.data + start * self.row_bytes
        end = begin + (stop - start) * self.row_bytes
        if end > self.size:
            self._truncated()
        aligned = begin - begin % mmap.ALLOCATIONGRANULARITY
        flags = mmap.MAP_SHARED | MAP_POPULATE
        window = mmap.mmap(self.file.fileno(), end - aligned, flags=flags, prot=mmap.PROT_READ, offset=aligned)
        values = np.frombuffer(
            window, dtype=self.dtype, count=(end - begin) // self.dtype.itemsize, offset=begin - aligned
        )
        return values.reshape(stop - start, *self.shape[1:])  # the mapping is closed with its last view

    def _truncated(self):
        path = Path(self.file.name)
        raise PackcliError(f"{path.parent.name}: {path.name} is truncated")


class _NpyShard:
    def __init__(self, path: Path, seq_len: int, labels: bool, buffers: dict[Any, np.ndarray]):
        self.path, self.seq_len, self.buffers = path, seq_len, buffers
        names = ["input_ids", "cu_seqlens", "cu_seqlens_offsets", "num_segments"] + (["labels"] if labels else [])
        missing = [name for name in names if not (path / f"{name}.npy").is_file()]
        if missing:
            raise PackcliError(f"{path.name}: missing file(s) {', '.join(f'{n}.npy' for n in missing)}")
        if (path / "cu_seqlens_unpadded.npy").is_file():
            names.append("cu_seqlens_unpadded")
        self.columns: dict[str, _NpyColumn] = {}
        try:
            with _shard_errors(path):
                for name in names:
                    self.columns[name] = _NpyColumn(path / f"{name}.npy")
                self._check()
        except BaseException:
            self.close()
            raise

    def _check(self) -> None:
        columns, path = self.columns, self.path
        n = columns["input_ids"].shape[0]
        for name in FIXED_COLUMNS:
            if name in columns and columns[name].shape != (n, self.seq_len):
                shape = columns[name].shape
                raise PackcliError(f"{path.name}: {name}.npy has shape {shape}, expected ({n}, {self.seq_len})")
        entries = columns["cu_seqlens"].shape
        last = columns["cu_seqlens_offsets"].read(n, n + 1) if columns["cu_seqlens_offsets"].shape == (n + 1,) else None
        if last is None or columns["num_segments"].shape != (n,) or (last[0],) != entries:
            raise PackcliError(f"{path.name}: cu_seqlens_offsets, num_segments and cu_seqlens do not match {n} rows")
        if "cu_seqlens_unpadded" in columns and columns["cu_seqlens_unpadded"].shape != entries:
            raise PackcliError(f"{path.name}: cu_seqlens_unpadded and cu_seqlens differ in length")

    def blocks(self, shard: int, first_row: int) -> Iterator[TokenBlock]:
        n = self.columns["input_ids"].shape[0]
        for start in range(0, n, READ_BLOCK_ROWS):
            stop = min(start + READ_BLOCK_ROWS, n)
            with _shard_errors(self.path):
                segments = self._segments(start, stop, first_row + start)
            yield TokenBlock(shard, first_row + start, segments, self._chunks(start, stop))

    def _segments(self, start: int, stop: int, first_row: int) -> Segments:
        columns = self.columns
        offsets = columns["cu_seqlens_offsets"].read(start, stop + 1)
        lo, hi = int(offsets[0]), int(offsets[-1])
        unpadded = columns["cu_seqlens_unpadded"].read(lo, hi) if "cu_seqlens_unpadded" in columns else None
        counts = columns["num_segments"].read(start, stop)
        return segments_of(columns["cu_seqlens"].read(lo, hi), offsets - lo, counts, unpadded, first_row)

    def _buffer(self, name: str, rows: int) -> np.ndarray:
        column = self.columns[name]
        key = (name, column.dtype, self.seq_len)
        if key not in self.buffers or len(self.buffers[key]) < rows:
            self.buffers[key] = np.empty((rows, self.seq_len), dtype=column.dtype)
        return self.buffers[key]

    def _rows(self, name: str, first: int, last: int, step: int) -> np.ndarray:
        if MAP_POPULATE:
            return self.columns[name].mapped(first, last)
        return self.columns[name].read(first, last, self._buffer(name, step)[: last - first])

    def _chunks(self, start: int, stop: int) -> Iterator[Chunk]:
        step = max(1, CHUNK_BYTES // self.columns["input_ids"].row_bytes)
        names = [name for name in FIXED_COLUMNS if name in self.columns]
        for first in range(start, stop, step):
            last = min(first + step, stop)
            with _shard_errors(self.path):
                read = {name: self._rows(name, first, last, step) for name in names}
            yield Chunk(first - start, read["input_ids"], read.get("labels"))

    def close(self) -> None:
        for column in self.columns.values():
            column.file.close()


class _ParquetShard:
    """A Parquet shard's blocks, only the columns asked for decoded (Arrow's buffers, no copy)."""

    def __init__(self, path: Path, seq_len: int, labels: bool):
        import pyarrow.parquet as pq

        self.path, self.seq_len = path, seq_len
        with _shard_errors(path):
            self.file = pq.ParquetFile(str(path), pre_buffer=False)  # pre-buffered row groups are kept to the end
            names = self.file.schema_arrow.names
        self.columns = ["input_ids", "cu_seqlens", "num_segments"] + (["labels"] if labels else [])
        missing = [name for name in self.columns if name not in names]
        if missing:
            raise PackcliError(f"{path.name}: missing column(s) {', '.join(missing)}")
        if "cu_seqlens_unpadded" in names:
            self.columns.append("cu_seqlens_unpadded")

    def blocks(self, shard: int, first_row: int) -> Iterator[TokenBlock]:
        start = 0
        batches = self.file.iter_batches(batch_size=READ_BLOCK_ROWS, columns=self.columns)
        while True:
            with _shard_errors(self.path):
                batch = next(batches, None)
                if batch is None:
                    return
                block = self._block(batch, shard, first_row + start)
            yield block
            start += len(block)

    def _block(self, batch, shard: int, first_row: int) -> TokenBlock:
        fixed = {name: self._fixed(batch, name, first_row) for name in FIXED_COLUMNS if name in self.columns}
        cu, offsets = _list_values(batch.column("cu_seqlens"))
        unpadded = None
        if "cu_seqlens_unpadded" in self.columns:
            unpadded, unpadded_offsets = _list_values(batch.column("cu_seqlens_unpadded"))
            if not np.array_equal(unpadded_offsets, offsets):
                raise PackcliError(f"{self.path.name}: cu_seqlens_unpadded and cu_seqlens differ in length")
        counts = batch.column("num_segments").to_numpy(zero_copy_only=False)
        segments = segments_of(cu, offsets, counts, unpadded, first_row)
        chunk = Chunk(0, fixed["input_ids"], fixed.get("labels"))
        return TokenBlock(shard, first_row, segments, iter([chunk]))

    def _fixed(self, batch, name: str, first_row: int) -> np.ndarray:
        values, offsets = _list_values(batch.column(name))
        widths = np.diff(offsets)
        if (widths != self.seq_len).any():
            bad = int(np.argmax(widths != self.seq_len))
            raise PackcliError(
                f"{self.path.name} row {first_row + bad}: {name} has {widths[bad]} tokens, not seq_len {self.seq_len}"
            )
        return values.reshape(batch.num_rows, self.seq_len)

    def close(self) -> None:
        self.file.close()


def _list_values(column) -> tuple[np.ndarray, np.ndarray]:
    """A list column's values (Arrow's buffer) and its row offsets from 0."""
    offsets = column.offsets.to_numpy().astype(np.int64)
    values = column.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return values, offsets - offsets[0]
