"""One shard of a packed output, read and checked: every row (row_checks.py) and its
per-segment columns (segment_checks.py), block by block, with what the shard holds (rows,
sequences, real tokens, tokens per source, pairs) for `verify` to hold against the
manifest; and the shard's checksum, computed as the writer defines it.

Blocks are bounded in tokens, so memory stays bounded however big a shard is. npy shards
are checked straight from their memory maps, Parquet shards read page by page
(write/shard_pages.py) where they can be.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from packcli.core.errors import PackcliError
from packcli.inspect.row_checks import RowBlock, check_block
from packcli.inspect.segment_checks import SegmentColumns, sum_sources
from packcli.write.columns import NPY_FILES, OPTIONAL_NPY_FILES
from packcli.write.shard_pages import ShardPages
from packcli.write.shard_reader import map_npy, npy_segment_maps, read_shard

BLOCK_TOKENS = 1 << 22  # rows read per block: memory stays bounded however big a shard is
HASH_CHUNK = 1 << 22


def shard_checksum(path: Path, stop: threading.Event) -> tuple[str | None, int]:
    """The manifest's checksum of a shard file or npy directory, and its size in bytes.

    The same definition as the writer's (format.md), computed here on purpose: verify
    trusts nothing of the code that wrote the shards."""
    if not path.exists():
        return None, 0
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    size = 0
    for file in files:
        if path.is_dir():
            digest.update(file.name.encode() + b"\0")
        with open(file, "rb", buffering=0) as f:
            while (got := f.readinto(buffer)) and not stop.is_set():
                digest.update(view[:got])
                size += got
    return "sha256:" + digest.hexdigest(), size


def check_shard(path: Path, fmt: str, name: str, options: dict, stop: threading.Event | None = None) -> dict:
    """Rows, sequences and real tokens of one shard (and real tokens per segment_source
    value, or None), checking every row on the way. `options`: output_rules, whether the
    shards hold a max_seqlen column, and the per-segment columns the manifest lists."""
    counted: dict[str, Any] = {"rows": 0, "sequences": 0, "real_tokens": 0, "sources": None, "pairs": []}
    options = dict(options)
    has_max, multiple = options.pop("max_seqlen_column", False), options.pop("pad_to_multiple_of", None) or 0
    sources, listed = options.pop("sources", None), options.pop("segment_columns", ())
    seq_len = options["seq_len"]
    block_rows = max(1, BLOCK_TOKENS // seq_len)
    for block in _shard_blocks(path, fmt, seq_len, block_rows):
        if stop is not None and stop.is_set():
            break
        missing = [column for column in listed if block.segments is None or column not in block.segments.columns]
        if missing:
            raise PackcliError(f"{name}: no {', '.join(missing)} column, but the manifest lists it")
        where, first = f"{name} row", counted["rows"]
        sequences, real, figures = check_block(block, options, has_max, multiple, where, first, sources)
        counted["rows"] += len(block.ids)
        counted["sequences"] += sequences
        counted["real_tokens"] += real
        counted["sources"] = sum_sources(counted["sources"], figures.per_source)
        if figures.pairs is not None:
            pair, row = figures.pairs
            counted["pairs"].append((pair, row + first))
    return counted


def _shard_blocks(path: Path, fmt: str, seq_len: int, block_rows: int) -> Iterator[RowBlock]:
    """A shard's rows, `block_rows` at a time; a column the shard lacks is None."""
    if fmt == "npy":
        arrays = _npy_shard_maps(path, seq_len)
        n = len(arrays["input_ids"])
        offsets = arrays["cu_seqlens_offsets"]
        seg_offsets, columns = npy_segment_maps(path, n)
        for start in range(0, n, block_rows):
            stop = min(start + block_rows, n)
            lo, hi = offsets[start], offsets[stop]
            segments = None
            if seg_offsets is not None:
                seg = np.asarray(seg_offsets[start : stop + 1], dtype=np.int64)
                segments = SegmentColumns(seg, {name: values[seg[0] : seg[-1]] for name, values in columns.items()})
            yield RowBlock(
                arrays["input_ids"][start:stop],
                arrays["labels"][start:stop],
                arrays["position_ids"][start:stop],
                arrays["cu_seqlens"][lo:hi],
                offsets[start : stop + 1],
                arrays["num_segments"][start:stop],
                arrays["max_seqlen"][start:stop] if "max_seqlen" in arrays else None,
                arrays["cu_seqlens_unpadded"][lo:hi] if "cu_seqlens_unpadded" in arrays else None,
                segments,
            )
        return
    pages = ShardPages.of(path)  # without pyarrow's list decoding, most of its read
    names = _parquet_columns(path) if pages is None else pages.columns
    for rows in read_shard(path, fmt, seq_len, block_rows=block_rows) if pages is None else pages.rows(seq_len):
        yield RowBlock.of(rows, "max_seqlen" in names)


def _parquet_columns(path: Path) -> list[str]:
    """The columns a Parquet shard holds (readers compute max_seqlen where it is missing)."""
    try:
        return list(pq.read_schema(str(path)).names)
    except Exception:
        return []  # read_shard names the damage


def _npy_shard_maps(path: Path, seq_len: int) -> dict:
    """Memory maps of an npy shard: the kernel streams through them, nothing is copied."""
    missing = [name for name in NPY_FILES if not (path / name).is_file()]
    if missing:
        raise PackcliError(f"{path.name}: missing file(s) {', '.join(missing)}")
    try:
        names = [*NPY_FILES, *(name for name in OPTIONAL_NPY_FILES if (path / name).is_file())]
        arrays = {name[:-4]: map_npy(path / name) for name in names}
    except Exception as exc:
        raise PackcliError(
            f"{path.name}: cannot read shard ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc
    n = len(arrays["input_ids"])
    for name in ("input_ids", "labels", "position_ids"):
        if arrays[name].shape != (n, seq_len):
            raise PackcliError(f"{path.name}: {name}.npy has shape {arrays[name].shape}, expected ({n}, {seq_len})")
    offsets = arrays["cu_seqlens_offsets"]
    if (
        len(offsets) != n + 1
        or len(arrays["num_segments"]) != n
        or offsets[0] != 0
        or offsets[-1] != len(arrays["cu_seqlens"])
    ):
        raise PackcliError(f"{path.name}: cu_seqlens_offsets, num_segments and cu_seqlens do not match {n} rows")
    return arrays
