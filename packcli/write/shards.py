"""Shard files on disk (docs/format.md): the streaming writers.

Each shard is written under a temporary name and renamed when complete, so a name
`shard-NNNNN.*` always means a finished file; `manifest.json` is written last by the
engine. Row groups (Parquet) and bytes (npy) do not depend on how rows arrive, so the
same rows always give the same bytes.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.core.arrow import arrow_array, int32_array
from packcli.core.errors import PackcliError
from packcli.core.flow import arrow_pool
from packcli.plan.grouping import group_counts
from packcli.plan.rows import Rows
from packcli.write.columns import (
    GROUP_COLUMN,
    GROUP_FILE,
    NPY_HEADER_BYTES,
    ROW_COLUMNS,
    SEGMENT_OFFSETS_FILE,
    ids_dtype,
    segment_dtype,
    shard_name,
)
from packcli.write.manifest import ShardEntry
from packcli.write.outdir import remove_path
from packcli.write.spill import as_int_dtype

ROW_GROUP_TOKENS = 1 << 20
HASH_WINDOW = 4 << 20  # bytes of a shard file mapped at a time while it is hashed


@dataclass
class ShardInfo:
    path: str
    rows: int
    sequences: int
    real_tokens: int
    checksum: str

    def to_dict(self) -> ShardEntry:
        return {
            "path": self.path,
            "rows": self.rows,
            "sequences": self.sequences,
            "real_tokens": self.real_tokens,
            "checksum": self.checksum,
        }


SegmentTypes = dict[str, np.dtype]  # a shard's per-segment columns and their stored dtypes, by name


def segment_types(rows: Rows) -> SegmentTypes:
    """The per-segment columns a shard opened on these rows holds, in name order."""
    return {name: segment_dtype(rows.segment_columns[name]) for name in sorted(rows.segment_columns)}


def _require_segment_columns(rows: Rows, types: SegmentTypes) -> None:
    """Rows written to a shard carry its per-segment columns, one entry per real segment."""
    if sorted(rows.segment_columns) != list(types):
        raise PackcliError(
            f"internal: rows with segment columns {sorted(rows.segment_columns)} in a shard of {list(types)}"
        )
    if types:
        count = int(rows.num_segments.sum())
        for name, values in rows.segment_columns.items():
            if len(values) != count:
                raise PackcliError(f"internal: {name} has {len(values)} entries for {count} segments")


def checksum(path: Path) -> str:
    """sha256 of a shard file, or of a shard directory's files in name order. Files are
    hashed through memory maps of a window at a time: read() would copy every byte out
    of the page cache into fresh buffers first, and a map of the whole file would count
    it all as resident."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    for file in files:
        if path.is_dir():
            digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for at in range(0, size, HASH_WINDOW):
                with mmap.mmap(f.fileno(), min(HASH_WINDOW, size - at), access=mmap.ACCESS_READ, offset=at) as window:
                    digest.update(window)
    return "sha256:" + digest.hexdigest()


class _ParquetShard:
    def __init__(
        self,
        tmp_path: Path,
        seq_len: int,
        unpadded: bool = False,
        grouped: bool = False,
        segments: SegmentTypes | None = None,
    ):
        self._pa = pa
        self.seq_len = seq_len
        self.group_rows = max(1, ROW_GROUP_TOKENS // seq_len)
        self.pending: list[Rows] = []
        self.pending_groups: list[np.ndarray] = []  # --group-by: the group id of each pending row
        self.pending_rows = 0
        self.grouped = grouped
        ints = pa.list_(pa.int32())
        self.unpadded = unpadded
        self.segments = segments or {}
        self.schema = pa.schema(
            [(name, ints) for name in (*ROW_COLUMNS, "cu_seqlens")]
            + [("num_segments", pa.int32()), ("max_seqlen", pa.int32())]
            + ([("cu_seqlens_unpadded", ints)] if unpadded else [])
            + ([(GROUP_COLUMN, pa.int32())] if grouped else [])
            + [(name, pa.list_(pa.from_numpy_dtype(dtype))) for name, dtype in self.segments.items()]
        )
        # zstd without dictionaries: a third of the default's bytes (snappy, dictionaries) in
        # two thirds of its time on packed token rows; statistics (min/max) only for the
        # per-row columns: on the list columns they select nothing and only cost write time
        # (docs/format.md)
        self.writer = pq.ParquetWriter(
            str(tmp_path),
            self.schema,
            compression="zstd",
            use_dictionary=False,
            write_statistics=[field.name for field in self.schema if not pa.types.is_list(field.type)],
            # jemalloc: any thread reuses its large blocks, so two shard writers keep one set
            # of encoding buffers (mimalloc kept a set per thread, 60 MB more with two shards
            # than with one; the system's zeroes fresh pages for each row group, a 20% slower
            # write: docs/benchmarks/spill-2026-11-26.md)
            memory_pool=arrow_pool("jemalloc"),
        )

    def write(self, rows: Rows, group: np.ndarray | None = None) -> None:
        self.pending.append(rows)
        if group is not None:
            self.pending_groups.append(group)
        self.pending_rows += len(rows)
        if self.pending_rows >= self.group_rows:
            block, groups = Rows.concat(self.pending), self._joined_groups()
            full = len(block) - len(block) % self.group_rows
            for start in range(0, full, self.group_rows):
                stop = start + self.group_rows
                self._write_group(block.slice(start, stop), None if groups is None else groups[start:stop])
            rest = block.slice(full, len(block))
            self.pending, self.pending_rows = ([rest] if len(rest) else []), len(rest)
            self.pending_groups = [groups[full:]] if groups is not None and len(rest) else []

    def _joined_groups(self) -> np.ndarray | None:
        return np.concatenate(self.pending_groups) if self.grouped else None

    def _write_group(self, rows: Rows, group: np.ndarray | None = None) -> None:
        pa = self._pa
        n, width = len(rows), self.seq_len
        fixed_offsets = int32_array(np.arange(0, (n + 1) * width, width, dtype=np.int32))

        def fixed(column: np.ndarray):
            return pa.ListArray.from_arrays(fixed_offsets, int32_array(column.reshape(-1)))

        cu = pa.ListArray.from_arrays(int32_array(rows.cu_offsets), int32_array(rows.cu_seqlens))
        arrays = [fixed(rows.input_ids), fixed(rows.labels), fixed(rows.position_ids), cu]
        arrays.append(int32_array(rows.num_segments))
        assert rows.max_seqlen is not None  # Rows fills it
        arrays.append(int32_array(rows.max_seqlen))
        if self.unpadded:
            if rows.cu_seqlens_unpadded is None:
                raise PackcliError("rows without cu_seqlens_unpadded in a shard that has the column")
            arrays.append(pa.ListArray.from_arrays(int32_array(rows.cu_offsets), int32_array(rows.cu_seqlens_unpadded)))
        if group is not None:
            arrays.append(int32_array(group))
        _require_segment_columns(rows, self.segments)
        if self.segments:
            offsets = int32_array(rows.seg_offsets)
            for name, dtype in self.segments.items():
                values = arrow_array(rows.segment_columns[name], dtype)
                arrays.append(pa.ListArray.from_arrays(offsets, values))
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))

    def finish(self) -> None:
        if self.pending:
            self._write_group(Rows.concat(self.pending), self._joined_groups())
        self.writer.close()

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


class _NpyFile:
    """An .npy file written row block by row block; the shape goes in the header at close."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...]):
        self.dtype, self.row_shape, self.rows = dtype, row_shape, 0
        self.file = open(path, "wb")
        self.file.write(b"\0" * NPY_HEADER_BYTES)

    def write(self, block: np.ndarray) -> None:
        self.file.write(as_int_dtype(block, self.dtype).data)  # the buffer itself, no bytes copy
        self.rows += len(block)

    def close(self) -> None:
        header = f"{{'descr': {self.dtype.str!r}, 'fortran_order': False, 'shape': {(self.rows, *self.row_shape)!r}, }}"
        prefix = b"\x93NUMPY\x01\x00" + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
        self.file.seek(0)
        self.file.write(prefix + header.ljust(NPY_HEADER_BYTES - 11).encode("latin1") + b"\n")
        self.file.close()


class _NpyShard:
    def __init__(
        self,
        tmp_dir: Path,
        seq_len: int,
        id_dtype: np.dtype,
        unpadded: bool = False,
        grouped: bool = False,
        segments: SegmentTypes | None = None,
    ):
        tmp_dir.mkdir()
        self.files = {
            "input_ids": _NpyFile(tmp_dir / "input_ids.npy", id_dtype, (seq_len,)),
            "labels": _NpyFile(tmp_dir / "labels.npy", np.dtype(np.int32), (seq_len,)),
            "position_ids": _NpyFile(tmp_dir / "position_ids.npy", np.dtype(np.int32), (seq_len,)),
            "cu_seqlens": _NpyFile(tmp_dir / "cu_seqlens.npy", np.dtype(np.int32), ()),
            "cu_seqlens_offsets": _NpyFile(tmp_dir / "cu_seqlens_offsets.npy", np.dtype(np.int64), ()),
            "num_segments": _NpyFile(tmp_dir / "num_segments.npy", np.dtype(np.int32), ()),
            "max_seqlen": _NpyFile(tmp_dir / "max_seqlen.npy", np.dtype(np.int32), ()),
        }
        if grouped:
            self.files[GROUP_COLUMN] = _NpyFile(tmp_dir / GROUP_FILE, np.dtype(np.int32), ())
        if unpadded:
            self.files["cu_seqlens_unpadded"] = _NpyFile(tmp_dir / "cu_seqlens_unpadded.npy", np.dtype(np.int32), ())
        self.files["cu_seqlens_offsets"].write(np.zeros(1, dtype=np.int64))
        self.cu_written = 0
        self.segments = segments or {}
        if self.segments:  # one CSR offsets file shared by the per-segment columns
            self.seg_offsets = _NpyFile(tmp_dir / SEGMENT_OFFSETS_FILE, np.dtype(np.int64), ())
            self.seg_offsets.write(np.zeros(1, dtype=np.int64))
            self.files.update({name: _NpyFile(tmp_dir / f"{name}.npy", t, ()) for name, t in self.segments.items()})
            self.files["segment_offsets"] = self.seg_offsets
        self.seg_written = 0

    def write(self, rows: Rows, group: np.ndarray | None = None) -> None:
        if group is not None:
            self.files[GROUP_COLUMN].write(group)
        for name in ROW_COLUMNS:
            self.files[name].write(getattr(rows, name))
        self.files["cu_seqlens"].write(rows.cu_seqlens)
        self.files["cu_seqlens_offsets"].write(rows.cu_offsets[1:] + self.cu_written)
        self.files["num_segments"].write(rows.num_segments)
        assert rows.max_seqlen is not None  # Rows fills it
        self.files["max_seqlen"].write(rows.max_seqlen)
        if "cu_seqlens_unpadded" in self.files:
            if rows.cu_seqlens_unpadded is None:
                raise PackcliError("rows without cu_seqlens_unpadded in a shard that has the column")
            self.files["cu_seqlens_unpadded"].write(rows.cu_seqlens_unpadded)
        self.cu_written += int(rows.cu_offsets[-1])
        _require_segment_columns(rows, self.segments)
        if self.segments:
            offsets = rows.seg_offsets
            self.seg_offsets.write(offsets[1:] + self.seg_written)
            for name in self.segments:
                self.files[name].write(rows.segment_columns[name])
            self.seg_written += int(offsets[-1])

    def finish(self) -> None:
        for f in self.files.values():
            f.close()

    def abort(self) -> None:
        for f in self.files.values():
            f.file.close()


class ShardWriter:
    """Cuts a stream of row blocks into shards of `rows_per_shard` rows."""

    def __init__(
        self,
        out_dir: Path,
        fmt: str,
        seq_len: int,
        rows_per_shard: int,
        vocab_size: int | None,
        done_shards: int = 0,
        grouped: bool = False,
        first_shard: int = 0,
    ):
        """done_shards: shards a resumed run finished already; their rows are counted, not written.
        grouped: rows come with their --group-by group id (`add(rows, group)`), written as a
        `group` column and counted per group in `group_counts`.
        first_shard: the index of the first shard it writes (`for_shard`)."""
        self.grouped = grouped
        self.first_shard = first_shard
        self.whole = True  # it writes every shard of the run (not a part from `for_shard`)
        self.group_counts = np.zeros((0, 3), dtype=np.int64)  # per group id: rows, sequences, real tokens
        self.out_dir, self.fmt, self.seq_len = Path(out_dir), fmt, seq_len
        self.rows_per_shard = rows_per_shard
        self.vocab_size = vocab_size
        self.id_dtype = ids_dtype(vocab_size)
        self.done_shards = done_shards
        self.shards: list[ShardInfo] = []
        # Finished shards are hashed on a thread while the next one is written (sha256
        # releases the GIL); close() collects the digests.
        self._hashing: ThreadPoolExecutor | None = None
        self._digests: list[Future[str]] = []
        self._current: _ParquetShard | _NpyShard | None = None
        self._rows = self._sequences = self._tokens = 0

    def _index(self) -> int:
        return self.first_shard + len(self.shards)

    @property
    def in_progress(self) -> bool:
        """Whether a shard is open: rows written to its temporary name, not finished yet."""
        return self._current is not None

    @property
    def started(self) -> bool:
        """Whether any row was given to it (shards after those are no longer independent)."""
        return bool(self.shards) or self._rows > 0

    def for_shard(self, index: int) -> ShardWriter:
        """A writer of shard `index` alone (give it that shard's rows), with this one's settings:
        shards are independent files, so two can be written at once; `absorb` takes it back."""
        part = ShardWriter(
            self.out_dir,
            self.fmt,
            self.seq_len,
            self.rows_per_shard,
            self.vocab_size,
            self.done_shards,
            self.grouped,
            first_shard=index,
        )
        part.whole = False
        return part

    def absorb(self, part: ShardWriter) -> None:
        """The shards of a closed `for_shard` writer, next in order (checksums and group counts)."""
        if part.first_shard != self._index() or self._rows:
            raise PackcliError("internal: shards absorbed out of order")
        for shard in part.shards:
            done: Future[str] = Future()
            done.set_result(shard.checksum)
            self.shards.append(shard)
            self._digests.append(done)
        counts = part.group_counts
        if len(counts) > len(self.group_counts):
            counts, self.group_counts = self.group_counts, counts.copy()
        self.group_counts[: len(counts)] += counts

    def _tmp_path(self, index: int) -> Path:
        return self.out_dir / f".{shard_name(index, self.fmt)}.tmp"

    def add(self, rows: Rows, group: np.ndarray | None = None) -> None:
        if self.grouped and (group is None or len(group) != len(rows)):
            raise PackcliError("internal: grouped rows written without one group id per row")
        start = 0
        while start < len(rows):
            skipping = self._index() < self.done_shards
            take = min(len(rows) - start, self.rows_per_shard - self._rows)
            block = rows.slice(start, start + take)
            part = None if group is None else np.asarray(group[start : start + take], dtype=np.int32)
            if not skipping:
                self._open_shard(block.cu_seqlens_unpadded is not None, segment_types(block)).write(block, part)
            self._rows += take
            self._sequences += int(block.num_segments.sum())
            real = block.real_lengths()
            self._tokens += int(real.sum())
            if part is not None:
                self._count_groups(part, block.num_segments, real)
            start += take
            if self._rows == self.rows_per_shard:
                self._close_shard()

    def _count_groups(self, group: np.ndarray, num_segments: np.ndarray, real: np.ndarray) -> None:
        n_groups = max(len(self.group_counts), int(group.max()) + 1 if len(group) else 0)
        if n_groups > len(self.group_counts):
            grown = np.zeros((n_groups, 3), dtype=np.int64)
            grown[: len(self.group_counts)] = self.group_counts
            self.group_counts = grown
        self.group_counts += group_counts(group, num_segments, real, n_groups)

    def _open_shard(self, unpadded: bool, segments: SegmentTypes) -> _ParquetShard | _NpyShard:
        """The shard being written, opened on its first rows (which say whether the rows
        have cu_seqlens_unpadded, and their per-segment columns)."""
        if self._current is None:
            tmp = self._tmp_path(self._index())
            if self.fmt == "parquet":
                self._current = _ParquetShard(tmp, self.seq_len, unpadded, self.grouped, segments)
            else:
                self._current = _NpyShard(tmp, self.seq_len, self.id_dtype, unpadded, self.grouped, segments)
        return self._current

    def _close_shard(self) -> None:
        index = self._index()
        final = self.out_dir / shard_name(index, self.fmt)
        if self._current is not None:
            self._current.finish()
            os.replace(self._tmp_path(index), final)
        if self._hashing is None:
            self._hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packcli-sha256")
        digest = self._hashing.submit(checksum, final)
        self.shards.append(ShardInfo(final.name, self._rows, self._sequences, self._tokens, ""))
        self._digests.append(digest)
        self._current = None
        self._rows = self._sequences = self._tokens = 0

    def close(self) -> list[ShardInfo]:
        if self._rows:
            self._close_shard()
        self._collect_digests()
        if self.whole and len(self.shards) < self.done_shards:
            raise PackcliError(
                f"resume found {self.done_shards} finished shards but the run makes only {len(self.shards)}; "
                "start again with --overwrite"
            )
        return self.shards

    def hashed_shards(self) -> list[ShardInfo]:
        """The closed shards, each with its checksum in: a shard's file may be moved away
        (uploaded to a remote output) only once it is hashed."""
        for shard, digest in zip(self.shards, self._digests):
            shard.checksum = digest.result()
        return self.shards

    def _collect_digests(self) -> None:
        self.hashed_shards()
        if self._hashing is not None:
            self._hashing.shutdown()
            self._hashing = None

    def abort(self) -> None:
        """Leave no temporary shard behind; finished shards stay (they are complete)."""
        if self._hashing is not None:
            self._hashing.shutdown(cancel_futures=True)
            self._hashing = None
        if self._current is not None:
            self._current.abort()
            self._current = None
        remove_path(self._tmp_path(self._index()))  # also when opening the shard failed
