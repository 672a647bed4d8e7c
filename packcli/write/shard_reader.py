"""Shards read back, in blocks of rows: Parquet through pyarrow, npy through memory maps.
verify, stats, the loaders and the exports all read through here."""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from packcli.core.errors import PackcliError
from packcli.plan.rows import Rows
from packcli.write.columns import (
    GROUP_COLUMN,
    GROUP_FILE,
    NPY_FILES,
    OPTIONAL_NPY_FILES,
    READ_BLOCK_ROWS,
    ROW_COLUMNS,
    SEGMENT_OFFSETS_FILE,
    is_segment_column,
)
from packcli.write.manifest import Manifest, ShardEntry


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
    columns += [c for c in parquet.schema_arrow.names if is_segment_column(c)]
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
        num_segments = batch.column("num_segments").to_numpy(zero_copy_only=False).astype(np.int32)
        yield Rows(
            fixed["input_ids"],
            fixed["labels"],
            fixed["position_ids"],
            cu_values.astype(np.int32, copy=False),
            cu_offsets - cu_offsets[0],
            num_segments,
            *_parquet_extras(batch, path, first_row, cu_offsets),
            _parquet_segments(batch, path, first_row, num_segments),
        )
        first_row += n


def _parquet_extras(
    batch, path: Path, first_row: int, cu_offsets: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
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


def _parquet_segments(batch, path: Path, first_row: int, num_segments: np.ndarray) -> dict[str, np.ndarray]:
    """The per-segment columns of a batch, flat, each row's list checked to hold num_segments entries."""
    out = {}
    for name in batch.schema.names:
        if not is_segment_column(name):
            continue
        column = batch.column(name)
        offsets = column.offsets.to_numpy().astype(np.int64)
        check_segment_counts(f"{path.name} row", name, np.diff(offsets), num_segments, first_row)
        out[name] = column.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return out


def check_segment_counts(where: str, name: str, counts: np.ndarray, num_segments: np.ndarray, first_row: int) -> None:
    """Every row holds one entry of a per-segment column per real segment, or an error
    names the first row that does not (`where`: "shard-00000.parquet row")."""
    wrong = np.flatnonzero(np.asarray(counts) != np.asarray(num_segments))
    if len(wrong):
        r = int(wrong[0])
        raise PackcliError(
            f"{where} {first_row + r}: {name} has {int(counts[r])} entries, num_segments is {int(num_segments[r])}"
        )


def npy_segment_maps(path: Path, rows: int) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    """(segment_offsets, {column: values}) of an npy shard's per-segment columns, memory
    mapped ((None, {}) for a shard without them), the offsets checked against the values."""
    names = sorted(p.name[:-4] for p in path.glob("*.npy") if is_segment_column(p.name[:-4]))
    offsets_file = path / SEGMENT_OFFSETS_FILE
    if not names and not offsets_file.is_file():
        return None, {}
    if not offsets_file.is_file():
        raise PackcliError(f"{path.name}: {', '.join(n + '.npy' for n in names)} without {SEGMENT_OFFSETS_FILE}")
    offsets = map_npy(offsets_file)
    values = {name: map_npy(path / f"{name}.npy") for name in names}
    if offsets.shape != (rows + 1,) or offsets[0] != 0:
        raise PackcliError(f"{path.name}: {SEGMENT_OFFSETS_FILE} does not match {rows} rows")
    for name, array in values.items():
        if array.ndim != 1 or len(array) != offsets[-1]:
            raise PackcliError(
                f"{path.name}: {name}.npy has {array.shape}, {SEGMENT_OFFSETS_FILE} says {int(offsets[-1])} entries"
            )
    return offsets, values


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
    seg_offsets, segments = npy_segment_maps(path, n)
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        lo, hi = int(offsets[start]), int(offsets[stop])
        num_segments = np.asarray(arrays["num_segments"][start:stop])
        columns = {}
        if seg_offsets is not None:
            seg = np.asarray(seg_offsets[start : stop + 1], dtype=np.int64)
            for name, values in segments.items():
                check_segment_counts(f"{path.name} row", name, np.diff(seg), num_segments, start)
                columns[name] = np.asarray(values[seg[0] : seg[-1]])
        yield Rows(
            np.asarray(arrays["input_ids"][start:stop], dtype=np.int32 if widen else None),
            np.asarray(arrays["labels"][start:stop]),
            np.asarray(arrays["position_ids"][start:stop]),
            np.asarray(arrays["cu_seqlens"][lo:hi]),
            np.asarray(offsets[start : stop + 1], dtype=np.int64) - lo,
            num_segments,
            np.asarray(arrays["max_seqlen"][start:stop]) if "max_seqlen" in arrays else None,
            np.asarray(arrays["cu_seqlens_unpadded"][lo:hi]) if "cu_seqlens_unpadded" in arrays else None,
            columns,
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
