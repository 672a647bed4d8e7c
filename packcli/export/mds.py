"""`packcli export mds`: MosaicML Streaming (MDS) shards, one sample per packed row.

Written by packcli from MDS's documented layout (no streaming import), so that
`StreamingDataset(local=OUT)` (LLM Foundry, Composer) reads them as they are. Columns:
`input_ids` (the npy format's dtype: uint16 or uint32), `labels`, `position_ids` (int32,
all `[seq_len]`), `cu_seqlens` (int32, one entry per segment boundary) and `num_segments`
(int).

The layout, as streaming's `MDSWriter` writes it (format version 2):
- `OUT/index.json`: `{"shards": [...], "version": 2}`, keys sorted; each shard entry holds
  its `samples`, `raw_data` and `zip_data` (`{"basename", "bytes", "hashes"}`, `zip_data`
  null without compression) and the writer's config: `version`, `format` ("mds"),
  `compression`, `hashes`, `size_limit`, `column_names` (sorted), `column_encodings`,
  `column_sizes` (bytes of a fixed-size column, else null).
- `OUT/shard.NNNNN.mds` (`.zstd`, `.gz`, ... appended when compressed): the sample count
  (uint32), the offset of every sample and of the end (uint32), the config as sorted
  JSON, then the samples. A sample is the byte size of each variable-size column (uint32),
  then each column's bytes in name order.
- A shard is cut before the sample that would take it past `size_limit`, counting the
  shard's head and 4 bytes per sample beside the samples themselves.
"""

from __future__ import annotations

import bz2
import ctypes
import functools
import gzip
import json
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError, needs_extra
from packcli.export.base import (
    IOV_MAX,
    Block,
    ExportDir,
    Progress,
    blocks,
    fetching_source,
    prefault,
    read_source,
    token_dtype,
    write_views,
)
from packcli.write.manifest import Manifest
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

COMPRESSIONS = ("zstd", "br", "gz", "snappy", "bz2")
SHAPE_DTYPES = ((1 << 8, "<u1"), (1 << 16, "<u2"), (1 << 32, "<u4"), (1 << 64, "<u8"))  # MDS's shape codes 0..3
FORMAT_VERSION = 2
EXTRA_BYTES_PER_SAMPLE = 4  # each sample's offset, counted against the size limit
INT_BYTES = 8  # the `int` encoding: int64


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def _brotli(data: bytes) -> bytes:
    with needs_extra("mds", "packcli export mds --compression br needs Brotli"):
        import brotli
    return brotli.compress(data, quality=11)


def _snappy(data: bytes) -> bytes:
    with needs_extra("mds", "packcli export mds --compression snappy needs python-snappy"):
        import snappy
    return snappy.compress(data)


# Each compression with the level streaming uses when none is given (zstd 3, brotli 11,
# gzip 9, bzip2 9); gzip's header time is 0, so the bytes depend only on the rows.
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": _zstd,
    "br": _brotli,
    "gz": lambda data: gzip.compress(data, 9, mtime=0),
    "snappy": _snappy,
    "bz2": lambda data: bz2.compress(data, 9),
}


def column_size(encoding: str) -> int | None:
    """The bytes every value of an MDS column takes, or None where its size varies:
    `int` is 8, `ndarray:DTYPE:SHAPE` its values, `ndarray:DTYPE` varies (its shape is stored)."""
    if encoding == "int":
        return INT_BYTES
    parts = encoding.split(":")
    if parts[0] != "ndarray" or len(parts) not in (2, 3):
        raise PackcliError(f"no MDS encoding {encoding!r} here")
    if len(parts) == 2:
        return None
    shape = [int(n) for n in parts[2].split(",")]
    return int(np.dtype(parts[1]).itemsize * np.prod(shape))


class MdsLayout:
    """What an MDS dataset's files say about it: the config every shard carries, the
    shard names and index.json's entries."""

    def __init__(self, directory: Path, columns: dict[str, str], compression: str | None, size_limit: int | None):
        if size_limit is not None and not 0 <= size_limit < 1 << 32:
            raise PackcliError("the MDS size limit must be below 2^32 (sample offsets are uint32)")
        self.directory = directory
        self.compression = compression
        self.size_limit = size_limit or None
        names = sorted(columns)
        self.config: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "format": "mds",
            "compression": compression,
            "hashes": [],
            "size_limit": self.size_limit,
            "column_names": names,
            "column_encodings": [columns[name] for name in names],
            "column_sizes": [column_size(columns[name]) for name in names],
        }
        self.config_data = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.extra_bytes_per_shard = 4 + 4 + len(self.config_data)
        self.shards: list[dict[str, Any]] = []

    def add_shard(self, samples: int) -> dict[str, Any]:
        """The next shard's index entry, its byte counts to be filled in when written."""
        raw = f"shard.{len(self.shards):05d}.mds"
        shard: dict[str, Any] = {
            "samples": samples,
            "raw_data": {"basename": raw, "bytes": 0, "hashes": {}},
            "zip_data": None if self.compression is None else {"basename": f"{raw}.{self.compression}", "hashes": {}},
            **self.config,
        }
        self.shards.append(shard)
        return shard

    def write_compressed(self, data: bytes, shard: dict[str, Any]) -> None:
        assert self.compression is not None
        packed = COMPRESSORS[self.compression](data)
        with open(self.directory / shard["zip_data"]["basename"], "wb") as f:
            f.write(packed)
        shard["raw_data"]["bytes"] = len(data)
        shard["zip_data"]["bytes"] = len(packed)

    def write_index(self) -> None:
        with open(self.directory / "index.json", "w", encoding="utf-8") as f:
            json.dump({"version": FORMAT_VERSION, "shards": self.shards}, f, sort_keys=True)


def mds_columns(manifest: Manifest) -> dict[str, str]:
    """The columns of an export: the row's, and the per-segment columns of preference
    pairs and weights (`segment_pair`, `segment_chosen`, `segment_weight`), one entry per
    real segment, when the output has them."""
    seq_len = manifest["seq_len"]
    columns = {
        "input_ids": f"ndarray:{token_dtype(manifest).name}:{seq_len}",
        "labels": f"ndarray:int32:{seq_len}",
        "position_ids": f"ndarray:int32:{seq_len}",
        "cu_seqlens": "ndarray:int32",
        "num_segments": "int",
    }
    for name in segment_columns(manifest):
        columns[name] = "ndarray:float32" if name == WEIGHT_COLUMN else "ndarray:int32"
    return columns


def segment_columns(manifest: Manifest) -> list[str]:
    """The per-segment columns an export carries, in name order (all after the row's)."""
    return sorted(name for name in (CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN) if name in manifest.get("columns", {}))


@dataclass
class EncodedBlock:
    """A block of rows encoded as MDS samples of `mds_columns`:
    sample i is `heads[head_offsets[i]:head_offsets[i + 1]]` followed by row i of each of
    `columns`, the fixed-size columns as bytes (views of the source where its dtype is
    the column's: nothing copied)."""

    heads: np.ndarray  # uint8, flat: each row's variable-size part
    head_offsets: np.ndarray  # int64 [rows + 1]
    columns: list[np.ndarray]  # uint8 [rows, column bytes] each, C-ordered, in name order
    tails: np.ndarray | None = None  # uint8, flat: each row's per-segment columns, after the others
    tail_offsets: np.ndarray | None = None  # int64 [rows + 1]

    def _tail(self) -> tuple[np.ndarray, np.ndarray]:
        if self.tails is None or self.tail_offsets is None:
            return np.zeros(0, np.uint8), np.zeros(len(self.head_offsets), np.int64)
        return self.tails, self.tail_offsets

    def __post_init__(self) -> None:
        rows = len(self.head_offsets) - 1
        arrays = (self.heads, *self.columns)
        if any(a.dtype != np.uint8 or not a.flags.c_contiguous for a in arrays) or self.heads.ndim != 1:
            raise PackcliError("EncodedBlock: heads and columns must be C-ordered uint8 arrays")
        if any(column.shape[:1] != (rows,) or column.ndim != 2 for column in self.columns):
            raise PackcliError(f"EncodedBlock: every column must have {rows} rows")
        offsets = self.head_offsets
        if offsets[0] < 0 or offsets[-1] > len(self.heads) or (np.diff(offsets) < 0).any():
            raise PackcliError("EncodedBlock: head_offsets must rise within heads")

    def sizes(self) -> np.ndarray:
        tail: np.ndarray = np.diff(self._tail()[1])
        return np.diff(self.head_offsets) + sum(column.shape[1] for column in self.columns) + tail

    def spans(self, start: int, stop: int) -> np.ndarray:
        """Where the bytes of samples start..stop-1 lie in memory, in order: one
        (address, length) pair per part of each sample, uint64 [parts, 2] -- the layout
        of `struct iovec`, for one `writev` of many samples with no Python step per row."""
        if not 0 <= start <= stop <= len(self.head_offsets) - 1:
            raise PackcliError(f"EncodedBlock.spans: rows {start}..{stop} outside the block")
        tailed = self.tails is not None
        spans = np.empty((stop - start, 1 + len(self.columns) + tailed, 2), dtype=np.uint64)
        offsets = self.head_offsets[start : stop + 1].astype(np.uint64)
        spans[:, 0, 0] = np.uint64(self.heads.ctypes.data) + offsets[:-1]
        spans[:, 0, 1] = np.diff(offsets)
        rows = np.arange(start, stop, dtype=np.uint64)
        for k, column in enumerate(self.columns, start=1):
            width = np.uint64(column.shape[1])
            spans[:, k, 0] = np.uint64(column.ctypes.data) + rows * width
            spans[:, k, 1] = width
        if tailed:
            tails, tail_offsets = self._tail()
            at = tail_offsets[start : stop + 1].astype(np.uint64)
            spans[:, -1, 0] = np.uint64(tails.ctypes.data) + at[:-1]
            spans[:, -1, 1] = np.diff(at)
        return spans.reshape(-1, 2)

    def parts(self, start: int, stop: int) -> list[memoryview]:
        """Samples start..stop-1 as byte views, for a shard joined into one bytes object
        (what the compressors take): a Python step per row, which the compressor
        makes small beside its own time."""
        if start == stop:
            return []
        offsets = self.head_offsets[start : stop + 1].tolist()
        heads = self.heads.data.cast("B")
        columns = [(column.data.cast("B"), column.shape[1]) for column in self.columns]
        tails, tail_offsets = self._tail()
        tail, at = tails.data.cast("B"), tail_offsets[start : stop + 1].tolist()
        out: list[memoryview] = []
        for k, i in enumerate(range(start, stop)):
            out.append(heads[offsets[k] : offsets[k + 1]])
            out += [data[i * width : (i + 1) * width] for data, width in columns]
            if self.tails is not None:
                out.append(tail[at[k] : at[k + 1]])
        return out

    def sample(self, i: int) -> bytes:
        return b"".join(self.parts(i, i + 1))


def encode_block(block: Block, ids_dtype: np.dtype, per_segment: list[str] | None = None) -> EncodedBlock:
    """Every row's MDS sample, built for the whole block at once (column by column and
    sample by sample in Python would be several times the cost of the bytes). Layout: the byte size of each variable-size column (uint32; cu_seqlens
    only), then the columns in name order; a fixed-shape array is its values, cu_seqlens
    is [ndim << 2 | shape dtype code][shape][values], an int is int64."""
    rows = block.rows
    n = len(rows)
    prefault(rows.input_ids, rows.labels, rows.position_ids)
    columns = [
        np.ascontiguousarray(rows.input_ids, dtype=ids_dtype.newbyteorder("<")).view(np.uint8),
        np.ascontiguousarray(rows.labels, dtype="<i4").view(np.uint8),
        rows.num_segments.astype("<i8").view(np.uint8),
        np.ascontiguousarray(rows.position_ids, dtype="<i4").view(np.uint8),
    ]
    columns = [np.ascontiguousarray(column.reshape(n, column.size // n if n else 0)) for column in columns]
    if not per_segment:
        heads, head_offsets = _encode_cu_seqlens(rows.cu_seqlens, rows.cu_offsets)
        return EncodedBlock(heads, head_offsets, columns)
    # several variable-size columns: every one's byte size first, then cu_seqlens; the
    # per-segment columns (named after position_ids) after the fixed-size ones
    cu = _ndarray_datums(rows.cu_seqlens, rows.cu_offsets, np.dtype("<i4"))
    seg_offsets = rows.seg_offsets
    tails = [_ndarray_datums(rows.segment_columns[name], seg_offsets, _segment_dtype(name)) for name in per_segment]
    sizes = np.stack([np.diff(cu[1]), *(np.diff(t[1]) for t in tails)], axis=1).astype("<u4").view(np.uint8)
    size_part = (sizes.reshape(-1), np.arange(n + 1, dtype=np.int64) * sizes.shape[1])
    heads, head_offsets = _rows_joined([size_part, cu])
    tail_bytes, tail_offsets = _rows_joined(tails)
    return EncodedBlock(heads, head_offsets, columns, tail_bytes, tail_offsets)


def _segment_dtype(name: str) -> np.dtype:
    return np.dtype("<f4") if name == WEIGHT_COLUMN else np.dtype("<i4")


def _ndarray_datums(values: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Each row's MDS `ndarray:DTYPE` datum ([ndim << 2 | shape code][shape][values]), flat,
    and where each row's starts; row r's values are values[offsets[r]:offsets[r + 1]]."""
    offsets = np.asarray(offsets, dtype=np.int64)
    widths = np.diff(offsets)
    codes = np.zeros(len(widths), dtype=np.int64)
    for limit, _ in SHAPE_DTYPES[:-1]:
        codes += widths >= limit
    shape_bytes = np.array([np.dtype(code_dtype).itemsize for _, code_dtype in SHAPE_DTYPES])[codes]
    item = dtype.itemsize
    datum = 1 + shape_bytes + item * widths
    out_offsets = np.zeros(len(widths) + 1, dtype=np.int64)
    np.cumsum(datum, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint8)
    starts = out_offsets[:-1]
    out[starts] = 4 | codes
    for code, (_, code_dtype) in enumerate(SHAPE_DTYPES):
        chosen = np.flatnonzero(codes == code)
        if len(chosen):
            size = np.dtype(code_dtype).itemsize
            shape = widths[chosen].astype(code_dtype).view(np.uint8).reshape(-1, size)
            out[(starts[chosen] + 1)[:, None] + np.arange(size)] = shape
    at = np.repeat(starts + 1 + shape_bytes - item * (offsets[:-1] - offsets[0]), widths)
    at = at + item * np.arange(int(widths.sum()))
    flat = np.ascontiguousarray(np.asarray(values)[offsets[0] : offsets[-1]], dtype=dtype).view(np.uint8)
    out[at[:, None] + np.arange(item)] = flat.reshape(-1, item)
    return out, out_offsets


def _rows_joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Parts of every row (each flat bytes and row offsets) as one: row r is part 0's row
    r, then part 1's, and so on."""
    widths = np.stack([np.diff(offsets) for _, offsets in parts], axis=1)  # [rows, parts]
    row_offsets = np.zeros(len(widths) + 1, dtype=np.int64)
    np.cumsum(widths.sum(axis=1), out=row_offsets[1:])
    out = np.empty(int(row_offsets[-1]), dtype=np.uint8)
    before = np.cumsum(widths, axis=1) - widths  # where each part starts inside its row
    for p, (data, offsets) in enumerate(parts):
        at = np.repeat(row_offsets[:-1] + before[:, p] - offsets[:-1], widths[:, p]) + np.arange(
            int(widths[:, p].sum())
        )
        out[at] = data[: offsets[-1]]  # every part's offsets start at 0
    return out, row_offsets


def _encode_cu_seqlens(cu: np.ndarray, cu_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's [uint32 datum size][4 | shape code][shape][int32 values], flat, and where each row's starts."""
    widths = np.diff(cu_offsets).astype(np.int64)
    codes = np.zeros(len(widths), dtype=np.int64)
    for limit, _ in SHAPE_DTYPES[:-1]:
        codes += widths >= limit
    shape_bytes = np.array([np.dtype(dtype).itemsize for _, dtype in SHAPE_DTYPES])[codes]
    datum = 1 + shape_bytes + 4 * widths
    head_offsets = np.zeros(len(widths) + 1, dtype=np.int64)
    np.cumsum(4 + datum, out=head_offsets[1:])
    heads = np.empty(int(head_offsets[-1]), dtype=np.uint8)
    starts = head_offsets[:-1]
    heads[starts[:, None] + np.arange(4)] = datum.astype("<u4").view(np.uint8).reshape(-1, 4)
    heads[starts + 4] = 4 | codes
    for code, (_, dtype) in enumerate(SHAPE_DTYPES):
        chosen = np.flatnonzero(codes == code)
        if len(chosen):
            size = np.dtype(dtype).itemsize
            shape = widths[chosen].astype(dtype).view(np.uint8).reshape(-1, size)
            heads[(starts[chosen] + 5)[:, None] + np.arange(size)] = shape
    # value k of row r sits at its row's values start + 4k
    value_starts = starts + 5 + shape_bytes
    at = np.repeat(value_starts - 4 * (cu_offsets[:-1] - cu_offsets[0]), widths) + 4 * np.arange(int(widths.sum()))
    values = np.ascontiguousarray(cu[cu_offsets[0] : cu_offsets[-1]], dtype="<i4").view(np.uint8).reshape(-1, 4)
    heads[at[:, None] + np.arange(4)] = values
    return heads, head_offsets


_NO_SPANS = np.zeros((0, 2), dtype=np.uint64)


def write_spans(fd: int, spans: np.ndarray) -> None:
    """The bytes at each (address, length) of `spans` to the file `fd`, in order, IOV_MAX
    spans a `writev` (libc's, given the table itself: no Python object per span). The
    caller keeps the memory alive. A short write resumes where it stopped."""
    spans = np.ascontiguousarray(spans, dtype=np.uint64)
    while len(spans):
        batch = spans[:IOV_MAX]
        written = _libc_writev()(fd, batch.ctypes.data, len(batch))
        if written < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        ends = np.cumsum(batch[:, 1])
        whole = int(np.searchsorted(ends, written, side="right"))  # spans written in full
        if whole == len(batch):
            spans = spans[whole:]
            continue
        spans = spans[whole:].copy()
        part = np.uint64(written - (int(ends[whole - 1]) if whole else 0))  # of the first span left
        spans[0, 0] += part
        spans[0, 1] -= part


@functools.cache
def _libc_writev() -> Any:
    if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_size_t) != 8:
        raise PackcliError("packcli export mds needs a 64-bit platform")
    writev = ctypes.CDLL(None, use_errno=True).writev
    writev.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    writev.restype = ctypes.c_ssize_t
    return writev


class _ShardCutter:
    """Samples into MDS shard files, cut where streaming's writer cuts them (a sample that
    would take the shard past `size_limit` starts the next one), with the shard entries
    of index.json. A shard's samples go out as spans of the blocks' own pages
    (`EncodedBlock.spans`), gathered by the kernel in a few `writev` calls: nothing copied
    in this process, no Python step per row. A shard to compress is joined into one bytes
    object first, as the compressors take it."""

    def __init__(self, layout: MdsLayout):
        self.layout = layout
        self.runs: list[tuple[EncodedBlock, int, int]] = []  # the pending shard's samples, by block
        self.sizes: list[np.ndarray] = []
        self.shard_size = layout.extra_bytes_per_shard
        self.workers = max(1, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="packcli-mds") if layout.compression else None
        self.compressing: deque[Future] = deque()

    def add(self, encoded: EncodedBlock) -> None:
        sizes = encoded.sizes()
        limit = self.layout.size_limit
        per_sample = EXTRA_BYTES_PER_SAMPLE
        i, n = 0, len(sizes)
        while i < n:
            cum = self.shard_size + np.cumsum(sizes[i:] + per_sample)
            fit = n - i if not limit else int(np.searchsorted(cum, limit, side="right"))
            self._take(encoded, sizes, i, i + fit)
            self.shard_size = int(cum[fit - 1]) if fit else self.shard_size
            i += fit
            if i < n:  # sample i does not fit: it opens the next shard, whatever its size
                self.flush()
                self._take(encoded, sizes, i, i + 1)
                self.shard_size += int(sizes[i]) + per_sample
                i += 1

    def _take(self, encoded: EncodedBlock, sizes: np.ndarray, start: int, stop: int) -> None:
        if stop > start:
            last = self.runs[-1] if self.runs else None
            if last is not None and last[0] is encoded and last[2] == start:
                self.runs[-1] = (encoded, last[1], stop)
            else:
                self.runs.append((encoded, start, stop))
            self.sizes.append(sizes[start:stop])

    def flush(self) -> None:
        """Write the pending samples as one shard: the sample count (uint32), every
        sample's offset from the shard's start (uint32, one more than the samples), the
        config, then the samples."""
        layout = self.layout
        sizes = np.concatenate(self.sizes) if self.sizes else np.zeros(0, dtype=np.int64)
        count = len(sizes)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += 4 + 4 * (count + 1) + len(layout.config_data)
        head = np.concatenate([np.array([count], "<u4"), offsets.astype("<u4")]).tobytes() + layout.config_data
        shard = layout.add_shard(count)
        if self.pool is not None:
            # zstd and the others release the GIL: shards compress side by side, a few in flight at most
            while len(self.compressing) >= self.workers:
                self.compressing.popleft().result()
            data = self._joined(head)
            self.compressing.append(self.pool.submit(layout.write_compressed, data, shard))
        else:
            raw = shard["raw_data"]
            with open(layout.directory / raw["basename"], "wb", buffering=0) as f:
                write_views(f.fileno(), [head])
                spans = [encoded.spans(start, stop) for encoded, start, stop in self.runs]
                write_spans(f.fileno(), np.concatenate(spans) if spans else _NO_SPANS)
            raw["bytes"] = int(offsets[-1])
        self.runs, self.sizes = [], []
        self.shard_size = layout.extra_bytes_per_shard

    def _joined(self, head: bytes) -> bytes:
        return b"".join([head, *(part for run in self.runs for part in run[0].parts(run[1], run[2]))])

    def finish(self) -> None:
        """The last shard, and every shard compressed (before index.json is written)."""
        try:
            if self.sizes:
                self.flush()
            while self.compressing:
                self.compressing.popleft().result()
        finally:
            self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@fetching_source
def export_mds(
    source: Path | str,
    out: Path | str,
    *,
    compression: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    size_limit: int = 1 << 26,
) -> dict[str, Any]:
    """Write OUT/index.json and its MDS shards (of at most `size_limit` bytes, streaming's
    default, before compression); returns a summary."""
    if compression is not None and compression not in COMPRESSIONS:
        raise PackcliError(f"compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}", usage=True)
    if compression is not None:
        COMPRESSORS[compression](b"")  # a missing library named before anything is written
    manifest = read_source(source)
    ids_dtype = token_dtype(manifest)
    rows = tokens = 0
    per_segment = segment_columns(manifest)
    with ExportDir(out, overwrite, last=lambda name: int(name == "index.json")) as tmp:
        layout = MdsLayout(tmp, mds_columns(manifest), compression, size_limit)
        shards = _ShardCutter(layout)
        try:
            for block in blocks(source, manifest, progress):
                shards.add(encode_block(block, ids_dtype, per_segment))
                rows += len(block.rows)
                tokens += int(block.real.sum())
            shards.finish()
        finally:
            shards.close()
        layout.write_index()
        files = len(layout.shards)
    return {"format": "mds", "out": str(out), "rows": rows, "real_tokens": tokens, "files": files, "notes": []}
