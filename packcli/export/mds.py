"""`packcli export mds`: MosaicML Streaming (MDS) shards, one sample per packed row.

Written with streaming's own `MDSWriter`, so `StreamingDataset(local=OUT)` (LLM Foundry,
Composer) reads them as they are. Columns: `input_ids` (the npy format's dtype: uint16 or
uint32), `labels`, `position_ids` (int32, all `[seq_len]`), `cu_seqlens` (int32, one
entry per segment boundary) and `num_segments` (int).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
import types
from collections import deque
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

COMPRESSIONS = ("zstd", "br", "gz", "snappy", "bz2")
SHAPE_DTYPES = ((1 << 8, "<u1"), (1 << 16, "<u2"), (1 << 32, "<u4"), (1 << 64, "<u8"))  # streaming's shape codes 0..3


def streaming_base() -> types.ModuleType:
    """`streaming.base`, where MDSWriter and StreamingDataset live.

    The package's `__init__` also imports `streaming.vision`, which needs torchvision;
    where torchvision is missing, or built for another torch (it then fails with
    "operator torchvision::nms does not exist"), the import fails although nothing here
    uses vision. Then the package is entered without its `__init__`: a bare module with
    the package's path, from which `streaming.base` imports as usual.
    """
    with needs_extra("mds", "packcli export mds needs mosaicml-streaming"):
        try:
            import streaming.base

            return streaming.base
        except (ImportError, RuntimeError) as exc:
            if _failed_on_vision(exc):
                for name in [name for name in sys.modules if name == "streaming" or name.startswith("streaming.")]:
                    del sys.modules[name]
                spec = importlib.util.find_spec("streaming")
                package = types.ModuleType("streaming")
                package.__path__ = list(spec.submodule_search_locations or []) if spec else []
                package.__spec__ = spec
                sys.modules["streaming"] = package
                from streaming import base

                return base
            raise


def _failed_on_vision(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return (exc.name or "").startswith("torchvision")
    return "torchvision" in str(exc)


def mds_columns(manifest: Manifest) -> dict[str, str]:
    seq_len = manifest["seq_len"]
    return {
        "input_ids": f"ndarray:{token_dtype(manifest).name}:{seq_len}",
        "labels": f"ndarray:int32:{seq_len}",
        "position_ids": f"ndarray:int32:{seq_len}",
        "cu_seqlens": "ndarray:int32",
        "num_segments": "int",
    }


@dataclass
class EncodedBlock:
    """A block of rows encoded as `MDSWriter.encode_sample` encodes them for `mds_columns`:
    sample i is `heads[head_offsets[i]:head_offsets[i + 1]]` followed by row i of each of
    `columns`, the fixed-size columns as bytes (views of the source where its dtype is
    the column's: nothing copied)."""

    heads: np.ndarray  # uint8, flat: each row's variable-size part
    head_offsets: np.ndarray  # int64 [rows + 1]
    columns: list[np.ndarray]  # uint8 [rows, column bytes] each, C-ordered, in name order

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
        return np.diff(self.head_offsets) + sum(column.shape[1] for column in self.columns)

    def spans(self, start: int, stop: int) -> np.ndarray:
        """Where the bytes of samples start..stop-1 lie in memory, in order: one
        (address, length) pair per part of each sample, uint64 [parts, 2] -- the layout
        of `struct iovec`, for one `writev` of many samples with no Python step per row."""
        if not 0 <= start <= stop <= len(self.head_offsets) - 1:
            raise PackcliError(f"EncodedBlock.spans: rows {start}..{stop} outside the block")
        spans = np.empty((stop - start, 1 + len(self.columns), 2), dtype=np.uint64)
        offsets = self.head_offsets[start : stop + 1].astype(np.uint64)
        spans[:, 0, 0] = np.uint64(self.heads.ctypes.data) + offsets[:-1]
        spans[:, 0, 1] = np.diff(offsets)
        rows = np.arange(start, stop, dtype=np.uint64)
        for k, column in enumerate(self.columns, start=1):
            width = np.uint64(column.shape[1])
            spans[:, k, 0] = np.uint64(column.ctypes.data) + rows * width
            spans[:, k, 1] = width
        return spans.reshape(-1, 2)

    def parts(self, start: int, stop: int) -> list[memoryview]:
        """Samples start..stop-1 as byte views, for a shard joined into one bytes object
        (what MDSWriter's compressors take): a Python step per row, which the compressor
        makes small beside its own time."""
        if start == stop:
            return []
        offsets = self.head_offsets[start : stop + 1].tolist()
        heads = self.heads.data.cast("B")
        columns = [(column.data.cast("B"), column.shape[1]) for column in self.columns]
        out: list[memoryview] = []
        for k, i in enumerate(range(start, stop)):
            out.append(heads[offsets[k] : offsets[k + 1]])
            out += [data[i * width : (i + 1) * width] for data, width in columns]
        return out

    def sample(self, i: int) -> bytes:
        return b"".join(self.parts(i, i + 1))


def encode_block(block: Block, ids_dtype: np.dtype) -> EncodedBlock:
    """Every row's MDS sample, built for the whole block at once: MDSWriter's own path
    encodes column by column and sample by sample in Python, several times the cost of
    the bytes. Layout: the byte size of each variable-size column (uint32; cu_seqlens
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
    heads, head_offsets = _encode_cu_seqlens(rows.cu_seqlens, rows.cu_offsets)
    return EncodedBlock(heads, head_offsets, columns)


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
    """Samples into MDS shard files, cut where MDSWriter cuts them (a sample that would
    take the shard past `size_limit` starts the next one); MDSWriter's own bookkeeping
    (names, compression, index.json) kept. A shard's samples go out as spans of the
    blocks' own pages (`EncodedBlock.spans`), gathered by the kernel in a few `writev`
    calls: nothing copied in this process, no Python step per row. A shard to compress
    is joined into one bytes object first, as MDSWriter's compressors need."""

    def __init__(self, writer: Any):
        self.writer = writer
        self.runs: list[tuple[EncodedBlock, int, int]] = []  # the pending shard's samples, by block
        self.sizes: list[np.ndarray] = []
        self.shard_size = writer.extra_bytes_per_shard
        self.workers = max(1, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="packcli-mds") if writer.compression else None
        self.compressing: deque[Future] = deque()

    def add(self, encoded: EncodedBlock) -> None:
        sizes = encoded.sizes()
        limit = self.writer.size_limit
        per_sample = self.writer.extra_bytes_per_sample
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
        """Write the pending samples as one shard (as `JointWriter.flush_shard` does): the
        sample count, every sample's offset, the config, then the samples."""
        writer = self.writer
        sizes = np.concatenate(self.sizes) if self.sizes else np.zeros(0, dtype=np.int64)
        count = len(sizes)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += 4 + 4 * (count + 1) + len(writer.config_data)
        head = np.concatenate([np.array([count], "<u4"), offsets.astype("<u4")]).tobytes() + writer.config_data
        raw_basename, zip_basename = writer._name_next_shard()
        shard: dict[str, Any] = {"samples": count, "raw_data": None, "zip_data": None}  # MDSWriter's keys, in order
        shard.update(writer.get_config())
        writer.shards.append(shard)
        if self.pool is not None:
            # zstd and the others release the GIL: shards compress side by side, each
            # as MDSWriter compresses it, a few in flight at most
            while len(self.compressing) >= self.workers:
                self.compressing.popleft().result()
            data = self._joined(head)
            self.compressing.append(self.pool.submit(self._process, data, raw_basename, zip_basename, shard))
        elif writer.hashes:
            self._process(self._joined(head), raw_basename, None, shard)
        else:
            with open(os.path.join(writer.local, raw_basename), "wb", buffering=0) as f:
                write_views(f.fileno(), [head])
                spans = [encoded.spans(start, stop) for encoded, start, stop in self.runs]
                write_spans(f.fileno(), np.concatenate(spans) if spans else _NO_SPANS)
            shard["raw_data"] = {"basename": raw_basename, "bytes": int(offsets[-1]), "hashes": {}}
            self._upload(raw_basename)
        self.runs, self.sizes = [], []
        self.shard_size = writer.extra_bytes_per_shard

    def _joined(self, head: bytes) -> bytes:
        return b"".join([head, *(part for run in self.runs for part in run[0].parts(run[1], run[2]))])

    def _process(self, data: bytes, raw_basename: str, zip_basename: str | None, shard: dict[str, Any]) -> None:
        """MDSWriter's own: hashes, compression, the file."""
        shard["raw_data"], shard["zip_data"] = self.writer._process_file(data, raw_basename, zip_basename)
        self._upload(zip_basename or raw_basename)

    def _upload(self, basename: str) -> None:
        self.writer.executor.submit(self.writer.cloud_writer.upload_file, basename).add_done_callback(
            self.writer.exception_callback
        )

    def finish(self) -> None:
        """The last shard, and every shard compressed (before MDSWriter writes index.json)."""
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
    """Write OUT/index.json and its MDS shards (of at most `size_limit` bytes, MDSWriter's
    default, before compression); returns a summary."""
    if compression is not None and compression not in COMPRESSIONS:
        raise PackcliError(f"compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}", usage=True)
    manifest = read_source(source)
    base = streaming_base()
    ids_dtype = token_dtype(manifest)
    rows = tokens = 0
    with ExportDir(out, overwrite, last=lambda name: int(name == "index.json")) as tmp:
        with base.MDSWriter(
            out=str(tmp),
            columns=mds_columns(manifest),
            compression=compression,
            size_limit=size_limit,
            progress_bar=False,
        ) as writer:
            shards = _ShardCutter(writer)
            try:
                for block in blocks(source, manifest, progress):
                    shards.add(encode_block(block, ids_dtype))
                    rows += len(block.rows)
                    tokens += int(block.real.sum())
                shards.finish()
            finally:
                shards.close()
        files = len(list(tmp.glob("shard.*.mds*")))
    return {"format": "mds", "out": str(out), "rows": rows, "real_tokens": tokens, "files": files, "notes": []}
