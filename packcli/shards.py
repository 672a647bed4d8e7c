"""Shard files on disk (SPEC section 3): streaming writers and block readers.

Each shard is written under a temporary name and renamed when complete, so a name
`shard-NNNNN.*` always means a finished file; `manifest.json` is written last by the
pipeline. Row groups (Parquet) and bytes (npy) do not depend on how rows arrive, so the
same rows always give the same bytes.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.errors import PackcliError
from packcli.flow import arrow_pool
from packcli.grouping import group_counts
from packcli.manifest import Manifest, ShardEntry
from packcli.outdir import remove_path
from packcli.rows import Rows
from packcli.spill import as_int_dtype

ROW_COLUMNS = ("input_ids", "labels", "position_ids")
NPY_FILES = (
    "input_ids.npy",
    "labels.npy",
    "position_ids.npy",
    "cu_seqlens.npy",
    "cu_seqlens_offsets.npy",
    "num_segments.npy",
)
GROUP_COLUMN = "group"  # --group-by: int32 group id of each row (the manifest's `groups` table)
GROUP_FILE = "group.npy"
OPTIONAL_NPY_FILES = ("max_seqlen.npy", "cu_seqlens_unpadded.npy")  # format 3; the second with --pad-to-multiple-of


def npy_shard_files(unpadded: bool, grouped: bool) -> tuple[str, ...]:
    """Every file a finished npy shard of this run holds: 7, 8 with --pad-to-multiple-of, +1 with --group-by."""
    return (
        *NPY_FILES,
        "max_seqlen.npy",
        *(("cu_seqlens_unpadded.npy",) if unpadded else ()),
        *((GROUP_FILE,) if grouped else ()),
    )


ROW_GROUP_TOKENS = 1 << 20
NPY_HEADER_BYTES = 128
READ_BLOCK_ROWS = 4096
HASH_WINDOW = 4 << 20  # bytes of a shard file mapped at a time while it is hashed


def shard_name(index: int, fmt: str) -> str:
    return f"shard-{index:05d}.parquet" if fmt == "parquet" else f"shard-{index:05d}"


def ids_dtype(vocab_size: int | None) -> np.dtype:
    """uint16 where every id fits; uint32 otherwise, or when the vocabulary is unknown."""
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size <= 65536 else np.dtype(np.uint32)


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


def int32_array(values: np.ndarray):
    """An Arrow int32 array over the same memory. `pyarrow.array` would do, but its first
    call imports pandas when it is installed: most of a second of start-up for nothing."""
    values = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


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
    def __init__(self, tmp_path: Path, seq_len: int, unpadded: bool = False, grouped: bool = False):
        self._pa = pa
        self.seq_len = seq_len
        self.group_rows = max(1, ROW_GROUP_TOKENS // seq_len)
        self.pending: list[Rows] = []
        self.pending_groups: list[np.ndarray] = []  # --group-by: the group id of each pending row
        self.pending_rows = 0
        self.grouped = grouped
        ints = pa.list_(pa.int32())
        self.unpadded = unpadded
        self.schema = pa.schema(
            [(name, ints) for name in (*ROW_COLUMNS, "cu_seqlens")]
            + [("num_segments", pa.int32()), ("max_seqlen", pa.int32())]
            + ([("cu_seqlens_unpadded", ints)] if unpadded else [])
            + ([(GROUP_COLUMN, pa.int32())] if grouped else [])
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
    def __init__(self, tmp_dir: Path, seq_len: int, id_dtype: np.dtype, unpadded: bool = False, grouped: bool = False):
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
                self._open_shard(block.cu_seqlens_unpadded is not None).write(block, part)
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

    def _open_shard(self, unpadded: bool) -> _ParquetShard | _NpyShard:
        """The shard being written, opened on its first rows (which say whether the rows
        have cu_seqlens_unpadded)."""
        if self._current is None:
            tmp = self._tmp_path(self._index())
            if self.fmt == "parquet":
                self._current = _ParquetShard(tmp, self.seq_len, unpadded, self.grouped)
            else:
                self._current = _NpyShard(tmp, self.seq_len, self.id_dtype, unpadded, self.grouped)
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


def read_shard(
    path: Path, fmt: str, seq_len: int, block_rows: int = READ_BLOCK_ROWS, widen: bool = True
) -> Iterator[Rows]:
    """Blocks of rows from one shard, memory bounded; damage is a PackcliError naming the shard.
    `widen=False` keeps npy input_ids in their stored dtype (views of the memory map)."""
    try:
        if fmt == "parquet":
            yield from read_shard_parquet(path, seq_len, block_rows)
        else:
            yield from read_shard_npy(path, seq_len, block_rows, widen)
    except PackcliError:
        raise
    except Exception as exc:
        raise PackcliError(
            f"{path.name}: cannot read shard ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc


def read_shard_parquet(path: Path, seq_len: int, block_rows: int = READ_BLOCK_ROWS) -> Iterator[Rows]:
    columns = [*ROW_COLUMNS, "cu_seqlens", "num_segments"]
    parquet = pq.ParquetFile(str(path), pre_buffer=False)  # bounded memory: pre-buffered row groups are kept to the end
    missing = [c for c in columns if c not in parquet.schema_arrow.names]
    if missing:
        raise PackcliError(f"{path.name}: missing column(s) {', '.join(missing)}")
    columns += [c for c in ("max_seqlen", "cu_seqlens_unpadded") if c in parquet.schema_arrow.names]
    first_row = 0
    for batch in parquet.iter_batches(batch_size=block_rows, columns=columns):
        n = batch.num_rows
        fixed = {}
        for name in ROW_COLUMNS:
            column = batch.column(name)
            offsets = column.offsets.to_numpy()
            widths = np.diff(offsets)
            if (widths != seq_len).any():
                bad = int(np.argmax(widths != seq_len))
                raise PackcliError(
                    f"{path.name} row {first_row + bad}: {name} has {widths[bad]} tokens, not seq_len {seq_len}"
                )
            values = column.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
            fixed[name] = values.astype(np.int32, copy=False).reshape(n, seq_len)
        cu = batch.column("cu_seqlens")
        cu_offsets = cu.offsets.to_numpy().astype(np.int64)
        cu_values = cu.values.to_numpy(zero_copy_only=False)[cu_offsets[0] : cu_offsets[-1]]
        yield Rows(
            fixed["input_ids"],
            fixed["labels"],
            fixed["position_ids"],
            cu_values.astype(np.int32, copy=False),
            cu_offsets - cu_offsets[0],
            batch.column("num_segments").to_numpy(zero_copy_only=False).astype(np.int32),
            *_parquet_extras(batch, path, first_row, cu_offsets),
        )
        first_row += n


def _parquet_extras(batch, path: Path, first_row: int, cu_offsets: np.ndarray) -> tuple:
    """(max_seqlen, cu_seqlens_unpadded) of a batch, each None when the shard lacks it."""
    names = batch.schema.names
    longest = None
    if "max_seqlen" in names:
        longest = batch.column("max_seqlen").to_numpy(zero_copy_only=False).astype(np.int32)
    unpadded = None
    if "cu_seqlens_unpadded" in names:
        column = batch.column("cu_seqlens_unpadded")
        offsets = column.offsets.to_numpy().astype(np.int64)
        if (np.diff(offsets) != np.diff(cu_offsets)).any():
            bad = int(np.argmax(np.diff(offsets) != np.diff(cu_offsets)))
            raise PackcliError(
                f"{path.name} row {first_row + bad}: cu_seqlens_unpadded and cu_seqlens differ in length"
            )
        unpadded = column.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]].astype(np.int32, copy=False)
    return longest, unpadded


def map_npy(path: Path) -> np.ndarray:
    """A read-only memory map of a .npy file: its header parsed by numpy's own reader and
    the file mapped once (`np.load(mmap_mode="r")` opens, resolves and maps through
    np.memmap at several times the cost, which a shard of seven files pays seven times)."""
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, fortran_order, dtype = read_header(file)
            offset = file.tell()
            if dtype.hasobject:
                raise ValueError("object arrays are not shard data")
            size = os.fstat(file.fileno()).st_size
            if size < offset + dtype.itemsize * math.prod(shape):
                raise ValueError(f"{size} bytes, shorter than its header says")
            if size == offset:  # nothing to map (an empty array)
                empty = np.empty(shape, dtype=dtype)
                empty.flags.writeable = False
                return empty
            data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise PackcliError(f"{path.parent.name}/{path.name}: not a readable .npy file ({exc})") from exc
    return np.ndarray(shape, dtype=dtype, buffer=data, offset=offset, order="F" if fortran_order else "C")


def read_shard_npy(path: Path, seq_len: int, block_rows: int = READ_BLOCK_ROWS, widen: bool = True) -> Iterator[Rows]:
    missing = [name for name in NPY_FILES if not (path / name).is_file()]
    if missing:
        raise PackcliError(f"{path.name}: missing file(s) {', '.join(missing)}")
    arrays = {name[:-4]: map_npy(path / name) for name in NPY_FILES}
    arrays.update({name[:-4]: map_npy(path / name) for name in OPTIONAL_NPY_FILES if (path / name).is_file()})
    n = len(arrays["input_ids"])
    for name in ROW_COLUMNS:
        if arrays[name].shape != (n, seq_len):
            raise PackcliError(f"{path.name}: {name}.npy has shape {arrays[name].shape}, expected ({n}, {seq_len})")
    offsets = arrays["cu_seqlens_offsets"]
    if len(offsets) != n + 1 or len(arrays["num_segments"]) != n or offsets[-1] != len(arrays["cu_seqlens"]):
        raise PackcliError(f"{path.name}: cu_seqlens_offsets, num_segments and cu_seqlens do not match {n} rows")
    if len(arrays.get("max_seqlen", np.zeros(n))) != n or len(
        arrays.get("cu_seqlens_unpadded", arrays["cu_seqlens"])
    ) != len(arrays["cu_seqlens"]):
        raise PackcliError(f"{path.name}: max_seqlen or cu_seqlens_unpadded do not match {n} rows")
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        lo, hi = int(offsets[start]), int(offsets[stop])
        yield Rows(
            np.asarray(arrays["input_ids"][start:stop], dtype=np.int32 if widen else None),
            np.asarray(arrays["labels"][start:stop]),
            np.asarray(arrays["position_ids"][start:stop]),
            np.asarray(arrays["cu_seqlens"][lo:hi]),
            np.asarray(offsets[start : stop + 1], dtype=np.int64) - lo,
            np.asarray(arrays["num_segments"][start:stop]),
            np.asarray(arrays["max_seqlen"][start:stop]) if "max_seqlen" in arrays else None,
            np.asarray(arrays["cu_seqlens_unpadded"][lo:hi]) if "cu_seqlens_unpadded" in arrays else None,
        )


def iter_output_rows(out_dir: Path | str, manifest: Manifest) -> Iterator[tuple[ShardEntry, Rows]]:
    """(shard entry, block of rows) over every shard the manifest (read by
    `manifest.load_manifest`, which checks its version) lists, in order."""
    for shard in manifest["shards"]:
        path = Path(out_dir) / shard["path"]
        if not path.exists():
            raise PackcliError(f"{shard['path']}: listed in the manifest but missing")
        for rows in read_shard(path, manifest["format"], manifest["seq_len"]):
            yield shard, rows


def read_group_column(path: Path, fmt: str, block_rows: int = READ_BLOCK_ROWS) -> Iterator[np.ndarray]:
    """The `group` column of a shard (--group-by outputs), in blocks of rows as `read_shard` gives them."""
    if fmt == "parquet":
        parquet = pq.ParquetFile(str(path), pre_buffer=False)
        if GROUP_COLUMN not in parquet.schema_arrow.names:
            raise PackcliError(f"{path.name}: no {GROUP_COLUMN!r} column, but the manifest records --group-by")
        for batch in parquet.iter_batches(batch_size=block_rows, columns=[GROUP_COLUMN]):
            yield batch.column(GROUP_COLUMN).to_numpy(zero_copy_only=False)
        return
    if not (path / GROUP_FILE).is_file():
        raise PackcliError(f"{path.name}: no {GROUP_FILE}, but the manifest records --group-by")
    groups = map_npy(path / GROUP_FILE)
    for start in range(0, len(groups), block_rows):
        yield np.asarray(groups[start : start + block_rows])


def iter_output_rows_stored(
    out_dir: Path | str, manifest: Manifest, block_rows: int = READ_BLOCK_ROWS
) -> Iterator[tuple[ShardEntry, Rows]]:
    """As `iter_output_rows`, but the columns keep the dtype they are stored in: npy
    columns are views of the files' memory maps (no copy), Parquet's are Arrow's int32
    buffers. For exports, which write the bytes out again: widening the ids to int32 and
    narrowing them back cost more than writing them."""
    for shard in manifest["shards"]:
        path = Path(out_dir) / shard["path"]
        if not path.exists():
            raise PackcliError(f"{shard['path']}: listed in the manifest but missing")
        for rows in read_shard(path, manifest["format"], manifest["seq_len"], block_rows, widen=False):
            yield shard, rows
