"""`packcli export mds`: MosaicML Streaming (MDS) shards, one sample per packed row.

Written with streaming's own `MDSWriter`, so `StreamingDataset(local=OUT)` (LLM Foundry,
Composer) reads them as they are. Columns: `input_ids` (the npy format's dtype: uint16 or
uint32), `labels`, `position_ids` (int32, all `[seq_len]`), `cu_seqlens` (int32, one
entry per segment boundary) and `num_segments` (int).
"""

from __future__ import annotations

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

from packcli.errors import PackcliError, needs_extra
from packcli.export import Block, ExportDir, Progress, blocks, prefault, read_source, token_dtype, write_views
from packcli.manifest import Manifest

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
    columns: list[np.ndarray]  # uint8 [rows, column bytes] each, in name order

    def sizes(self) -> np.ndarray:
        return np.diff(self.head_offsets) + sum(column.shape[1] for column in self.columns)

    def parts(self, start: int, stop: int) -> list[memoryview]:
        """Samples start..stop-1 as byte views (nothing copied; memoryview slices, a
        fraction of the cost of NumPy's views)."""
        offsets = self.head_offsets[start : stop + 1].tolist()
        heads = self.heads.data.cast("B")
        columns = [(column.data.cast("B"), column.shape[1]) for column in self.columns]
        (ids, w0), (labels, w1), (counts, w2), (positions, w3) = columns
        out: list[memoryview] = []
        for k, i in enumerate(range(start, stop)):
            out += (heads[offsets[k] : offsets[k + 1]], ids[i * w0 : i * w0 + w0], labels[i * w1 : i * w1 + w1])
            out += (counts[i * w2 : i * w2 + w2], positions[i * w3 : i * w3 + w3])
        return out

    def sample(self, i: int) -> bytes:
        return b"".join(part.tobytes() for part in self.parts(i, i + 1))


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


class _ShardCutter:
    """Samples into MDS shard files, cut where MDSWriter cuts them (a sample that would
    take the shard past `size_limit` starts the next one), each shard written with one
    gathered write; MDSWriter's own bookkeeping (names, compression, index.json) kept."""

    def __init__(self, writer: Any):
        self.writer = writer
        self.parts: list[memoryview] = []
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
            self.parts.extend(encoded.parts(start, stop))
            self.sizes.append(sizes[start:stop])

    def flush(self) -> None:
        """Write the pending samples as one shard (as `JointWriter.flush_shard` does)."""
        writer = self.writer
        sizes = np.concatenate(self.sizes) if self.sizes else np.zeros(0, dtype=np.int64)
        count = len(sizes)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += 4 + 4 * (count + 1) + len(writer.config_data)
        header = np.concatenate([np.array([count], "<u4"), offsets.astype("<u4")]).view(np.uint8)
        parts: list[Any] = [header, writer.config_data, *self.parts]
        raw_basename, zip_basename = writer._name_next_shard()
        shard: dict[str, Any] = {"samples": count, "raw_data": None, "zip_data": None}  # MDSWriter's keys, in order
        shard.update(writer.get_config())
        writer.shards.append(shard)
        if self.pool is not None:
            # zstd and the others release the GIL: shards compress side by side, each
            # as MDSWriter compresses it, a few in flight at most
            while len(self.compressing) >= self.workers:
                self.compressing.popleft().result()
            data = b"".join(parts)
            self.compressing.append(self.pool.submit(self._process, data, raw_basename, zip_basename, shard))
        elif writer.hashes:
            self._process(b"".join(parts), raw_basename, None, shard)
        else:
            with open(os.path.join(writer.local, raw_basename), "wb", buffering=0) as f:
                write_views(f.fileno(), parts)
            shard["raw_data"] = {"basename": raw_basename, "bytes": int(offsets[-1]), "hashes": {}}
            self._upload(raw_basename)
        self.parts, self.sizes = [], []
        self.shard_size = writer.extra_bytes_per_shard

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
    with ExportDir(out, overwrite) as tmp:
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
