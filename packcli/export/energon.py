"""`packcli export energon`: WebDataset tar shards prepared for Megatron-Energon.

One sample per packed row, keyed by its row number, with one `.npy` part per column
(`<key>.input_ids.npy`, `<key>.labels.npy`, `<key>.position_ids.npy`,
`<key>.cu_seqlens.npy`, `<key>.num_segments.npy`), one tar per packed shard, every
sample in the train split and a `dataset.yaml` for `CrudeWebdataset`: a task encoder's
cooker turns the crude samples into whatever the model takes.

The index is what `energon prepare` writes, written by packcli as the tars are (no
energon import, no tar read back), in the layout of energon 7 (checked by the tests
against the installed energon's own preparation of the same tars):
- `OUT/shard-NNNNN.tar.idx`: the byte offset of every sample's first header, then the
  tar's end, uint64 little-endian.
- `OUT/.nv-meta/index.sqlite`: table `samples` (tar_file_id, sample_key UNIQUE,
  sample_index, byte_offset, byte_size: a sample's headers and contents) and table
  `sample_parts` (tar_file_id, sample_index, part_name, content_byte_offset,
  content_byte_size), with energon's three indexes; tar_file_id counts the tars in
  order, sample_index the samples in a tar.
- `OUT/.nv-meta/.info.json`: `energon_version` and `shard_counts` (samples per tar).
- `OUT/.nv-meta/split.yaml`: every tar in the train split, runs of consecutive tars as
  brace ranges (`shard-{00000..00003}.tar`), `val`, `test` and `exclude` empty.
- `OUT/.nv-meta/index.uuid`: derived from the source's checksums and the index rows
  (energon draws it at random), so an export's bytes depend only on its input.
- `OUT/.nv-meta/dataset.yaml`: the sample type.
"""

from __future__ import annotations

import hashlib
import json
import queue
import re
import sqlite3
import tarfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from packcli.core.errors import PackcliError
from packcli.export.base import (
    Block,
    ExportDir,
    Progress,
    blocks,
    dropped_columns,
    fetching_source,
    read_source,
    token_dtype,
    write_views,
)

COLUMNS = ("input_ids", "labels", "position_ids", "cu_seqlens", "num_segments")
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
KEY_DIGITS = 10
CHUNK_BYTES = 1 << 21  # members laid out and written at a time: the buffer stays in cache
# the energon release whose prepared layout EnergonIndex writes, named in .info.json as
# energon names the release that prepared a dataset
ENERGON_VERSION = "7.4.1"


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy version 1.0 header `np.save` writes, built once per shape instead of per array."""
    header = f"{{'descr': {dtype.str!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    size = 10 + len(header) + 1
    header += " " * (-size % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


NPY_SCALAR = npy_header(np.dtype("<i4"), ())  # num_segments: one int32


def _header_template() -> bytearray:
    """A ustar member header as tarfile writes it (mode 644, owner 0, time 0), with an
    empty name, and its size and checksum fields to be filled in."""
    info = tarfile.TarInfo("")
    info.mode = 0o644
    header = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    header[148:156] = b" " * 8  # the checksum is summed with its own field as spaces
    return header


class _TarShard:
    """A ustar tar written a block of members at a time. Its buffer keeps the bytes that
    rows of one shape share (headers but for name, size and checksum, .npy headers,
    padding) from one run of rows to the next, so that mostly the values are copied."""

    def __init__(self, path: Path, shard: int):
        self.file: BinaryIO = open(path, "wb")
        self.name, self.shard = path.name, shard
        self.buffer = np.empty(CHUNK_BYTES, dtype=np.uint8)
        self.position = 0
        self.laid_out: tuple[tuple[int, ...], int] | None = None  # shape and rows at the buffer's start

    def write_layout(self, layout: _Layout) -> None:
        """A block's members, laid out in the reused buffer a run of rows at a time and
        written a buffer at a time."""
        used = 0
        for a, b in layout.runs(CHUNK_BYTES):
            nbytes = int(layout.member_bytes[a:b].sum())
            if used + nbytes > len(self.buffer):
                self._flush(used)
                used = 0
                if nbytes > len(self.buffer):
                    self.buffer = np.empty(nbytes, dtype=np.uint8)
                    self.laid_out = None
            shape, ready = layout.shape(a), False
            if used == 0:  # the only place a run starts twice: the shared bytes may be there already
                ready = self.laid_out is not None and self.laid_out[0] == shape and self.laid_out[1] >= b - a
                self.laid_out = (shape, b - a)
            layout.fill(self.buffer[used : used + nbytes], a, b, ready)
            used += nbytes
        self._flush(used)

    def _flush(self, used: int) -> None:
        if used:
            write_views(self.file.fileno(), [self.buffer[:used]])
            self.position += used

    def close(self) -> None:
        self.file.write(bytes(2 * tarfile.BLOCKSIZE))  # the end-of-archive marker
        self.file.close()


TEMPLATE = np.frombuffer(bytes(_header_template()), dtype=np.uint8)
SUFFIXES = [np.frombuffer(f".{column}.npy".encode("ascii"), dtype=np.uint8) for column in COLUMNS]


def _write_block(tar: _TarShard, block: Block, ids_dtype: np.dtype, index: EnergonIndex | None) -> None:
    """The block's rows as tar members, five per row: what differs from row to row (names,
    checksums, cu_seqlens, counts) computed for the whole block at once, the members laid
    out in a reused buffer a run of rows at a time (see `_Layout`) and written with one
    call per buffer; where each member landed goes to the index."""
    rows = block.rows
    n, seq_len = len(rows), rows.seq_len
    if block.first_row + n > 10**KEY_DIGITS:
        raise PackcliError(f"energon sample keys have {KEY_DIGITS} digits: an output of more than 10^{KEY_DIGITS} rows")
    if n == 0:
        return
    int32 = np.dtype("<i4")
    fixed = [
        (npy_header(ids_dtype, (seq_len,)), np.ascontiguousarray(rows.input_ids, dtype=ids_dtype.newbyteorder("<"))),
        (npy_header(int32, (seq_len,)), np.ascontiguousarray(rows.labels, dtype=int32)),
        (npy_header(int32, (seq_len,)), np.ascontiguousarray(rows.position_ids, dtype=int32)),
    ]
    offsets = rows.cu_offsets - rows.cu_offsets[0]
    widths = np.diff(offsets)
    unique, inverse = np.unique(widths, return_inverse=True)  # one cu_seqlens .npy header per distinct width
    cu_texts = [npy_header(int32, (w,)) for w in unique.tolist()]
    cu_lengths = np.array([len(t) for t in cu_texts], dtype=np.int64)[inverse]
    sizes = np.empty((n, len(COLUMNS)), dtype=np.int64)
    for c, (header, values) in enumerate(fixed):
        sizes[:, c] = len(header) + values[0].nbytes
    sizes[:, 3] = cu_lengths + 4 * widths
    sizes[:, 4] = len(NPY_SCALAR) + 4
    member_bytes = tarfile.BLOCKSIZE + sizes + (-sizes % tarfile.BLOCKSIZE)
    member_offsets = (tar.position + np.cumsum(member_bytes) - member_bytes.ravel()).reshape(n, len(COLUMNS))
    if index is not None:
        index.add(tar, block.first_row, member_offsets, member_bytes, sizes)
    cu_table = np.zeros((len(cu_texts), max(map(len, cu_texts))), dtype=np.uint8)
    for k, text in enumerate(cu_texts):
        cu_table[k, : len(text)] = np.frombuffer(text, dtype=np.uint8)
    keys = np.arange(block.first_row, block.first_row + n, dtype=np.int64)
    names = (keys[:, None] // 10 ** np.arange(KEY_DIGITS - 1, -1, -1) % 10 + ord("0")).astype(np.uint8)
    size_digits = _octal_digits(sizes, 11)
    layout = _Layout(
        sizes=sizes,
        member_bytes=member_bytes,
        fixed=[(np.frombuffer(h, dtype=np.uint8), np.asarray(v).reshape(n, -1).view(np.uint8)) for h, v in fixed],
        names=names,
        cu_size_digits=size_digits[:, 3],
        checksums=_checksum_fields(names, size_digits),
        cu_headers=cu_table[inverse],
        cu_lengths=cu_lengths,
        cu_values=np.ascontiguousarray(rows.cu_seqlens, dtype=int32)[rows.cu_offsets[0] : rows.cu_offsets[-1]],
        cu_starts=offsets,
        counts=rows.num_segments.astype(int32).view(np.uint8).reshape(n, 4),
    )
    tar.write_layout(layout)


def _checksum_fields(names: np.ndarray, size_digits: np.ndarray) -> np.ndarray:
    """Each member header's checksum field ([rows, columns, 8]): the sum of the header's
    bytes with the field as spaces, the template's sum with its name and size replaced."""
    base = int(TEMPLATE.sum()) - int(TEMPLATE[:100].sum()) - int(TEMPLATE[124:136].sum())
    suffixes = np.array([int(suffix.sum()) for suffix in SUFFIXES], dtype=np.int64)
    totals = base + names.sum(axis=1, dtype=np.int64)[:, None] + suffixes + size_digits.sum(axis=2, dtype=np.int64)
    fields = np.empty((*totals.shape, 8), dtype=np.uint8)
    fields[..., :6] = _octal_digits(totals, 6)
    fields[..., 6] = 0
    fields[..., 7] = ord(" ")
    return fields


@dataclass
class _Layout:
    """A block's members, row by row: their content sizes and bytes in the tar (header,
    content, padding), both [rows, columns]; the fixed columns' (.npy header, [rows, bytes]
    values); each row's name digits, cu_seqlens size field and checksum fields; each row's
    cu_seqlens .npy header (left-aligned in a [rows, width] table) and its length, the
    cu_seqlens values (int32, flat) and each row's start in them, the counts ([rows, 4] bytes)."""

    sizes: np.ndarray
    member_bytes: np.ndarray
    fixed: list[tuple[np.ndarray, np.ndarray]]
    names: np.ndarray
    cu_size_digits: np.ndarray
    checksums: np.ndarray
    cu_headers: np.ndarray
    cu_lengths: np.ndarray
    cu_values: np.ndarray
    cu_starts: np.ndarray
    counts: np.ndarray

    def runs(self, most: int) -> Iterator[tuple[int, int]]:
        """Rows [a, b) whose members all take the same bytes (most rows of a block: only
        rows with a longer cu_seqlens differ), at most `most` bytes of them at a time."""
        shape = np.concatenate([self.member_bytes, self.cu_lengths[:, None]], axis=1)
        cuts = np.flatnonzero((shape[1:] != shape[:-1]).any(axis=1)) + 1
        row_bytes = self.member_bytes.sum(axis=1)
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(shape)], strict=True):
            step = max(1, most // int(row_bytes[a]))
            for start in range(a, b, step):
                yield start, min(start + step, b)

    def shape(self, row: int) -> tuple[int, ...]:
        """What decides the bytes a run's rows share: every member's bytes, the fixed
        columns' content sizes, the cu_seqlens header's length."""
        return (*self.member_bytes[row].tolist(), *self.sizes[row, :3].tolist(), int(self.cu_lengths[row]))

    def shared_row(self, row: int) -> np.ndarray:
        """The bytes the rows of `row`'s shape share: headers without name and checksum
        (cu_seqlens without its size), the fixed columns' .npy headers, zero padding, the
        count's .npy header."""
        starts = np.concatenate([[0], np.cumsum(self.member_bytes[row])]).tolist()
        out = np.zeros(starts[-1], dtype=np.uint8)
        for c, suffix in enumerate(SUFFIXES):
            at = starts[c]
            out[at : at + tarfile.BLOCKSIZE] = TEMPLATE
            out[at + KEY_DIGITS : at + KEY_DIGITS + len(suffix)] = suffix
            out[at + 124 : at + 135] = _octal_digits(self.sizes[row, c], 11)
        for c, (header, _) in enumerate(self.fixed):
            at = starts[c] + tarfile.BLOCKSIZE
            out[at : at + len(header)] = header
        at = starts[4] + tarfile.BLOCKSIZE
        out[at : at + len(NPY_SCALAR)] = np.frombuffer(NPY_SCALAR, dtype=np.uint8)
        return out

    def fill(self, out: np.ndarray, a: int, b: int, ready: bool) -> None:
        """Rows [a, b) (members of the same bytes) into `out`, which holds exactly their
        bytes, and if `ready` already the bytes they share."""
        k = b - a
        rows = out.reshape(k, -1)
        if not ready:
            rows[:] = self.shared_row(a)
        starts = np.concatenate([[0], np.cumsum(self.member_bytes[a])]).tolist()
        for c in range(len(COLUMNS)):
            rows[:, starts[c] : starts[c] + KEY_DIGITS] = self.names[a:b]
            rows[:, starts[c] + 148 : starts[c] + 156] = self.checksums[a:b, c]
        rows[:, starts[3] + 124 : starts[3] + 135] = self.cu_size_digits[a:b]
        for c, (header, values) in enumerate(self.fixed):
            at = starts[c] + tarfile.BLOCKSIZE + len(header)
            rows[:, at : at + values.shape[1]] = values[a:b]
        at, width = starts[3] + tarfile.BLOCKSIZE, int(self.cu_lengths[a])
        rows[:, at : starts[4]] = 0  # cu_seqlens: zeros first, the header and values over them
        rows[:, at : at + width] = self.cu_headers[a:b, :width]
        # each row's cu_seqlens values after its header: an int32 scatter (the rows are 512-byte multiples)
        counts = np.diff(self.cu_starts[a : b + 1])
        first = (np.arange(k) * rows.shape[1] + at + width) // 4 - (self.cu_starts[a:b] - self.cu_starts[a])
        out.view(np.int32)[np.repeat(first, counts) + np.arange(int(counts.sum()))] = self.cu_values[
            self.cu_starts[a] : self.cu_starts[b]
        ]
        at = starts[4] + tarfile.BLOCKSIZE + len(NPY_SCALAR)
        rows[:, at : at + 4] = self.counts[a:b]


def _octal_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """ASCII octal digits of each value, zero-padded: `b"%0*o" % value` for a whole array."""
    shifts = 3 * np.arange(digits - 1, -1, -1)
    return (((values[..., None] >> shifts) & 7) + ord("0")).astype(np.uint8)


class EnergonIndex:
    """`.nv-meta/` as energon's preparation (`energon prepare`) writes it: index.sqlite,
    .info.json, split.yaml, index.uuid, and each tar's `.tar.idx`, from where the export
    put each member: no tar is read back. The rows go in one transaction in tar and
    sample order, so the bytes depend only on the input, and index.uuid is derived from
    the source's checksums and the index rows instead of drawn at random.

    SQLite's inserts run in a thread of their own (sqlite releases the GIL while it
    works), beside the tar writes, a few blocks behind at most."""

    def __init__(self, directory: Path, identity: list[str]):
        """identity: what makes the tars' bytes (the source's checksums, the columns and their dtypes)."""
        self.directory = directory
        self.meta = directory / ".nv-meta"
        self.meta.mkdir()
        self.digest = hashlib.sha256("\0".join(identity).encode())
        self.counts: dict[str, int] = {}
        self.itar: BinaryIO | None = None
        self.pending: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=4)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._insert_all, name="packcli-energon-index", daemon=True)
        self.thread.start()

    def add(
        self, tar: _TarShard, first_row: int, offsets: np.ndarray, member_bytes: np.ndarray, sizes: np.ndarray
    ) -> None:
        """A block's rows: each member's header offset in the tar, its bytes there (with
        header and padding) and its content size, all [rows, columns]."""
        if tar.name not in self.counts:
            self.counts[tar.name] = 0
            self.itar = open(self.directory / (tar.name + ".idx"), "wb")
        assert self.itar is not None
        tar_id, first_index = len(self.counts) - 1, self.counts[tar.name]
        self.counts[tar.name] += len(sizes)
        self.itar.write(offsets[:, 0].astype("<u8").tobytes())  # where each sample's first header starts
        self.digest.update(offsets.tobytes() + sizes.tobytes())
        if self.failure is not None:
            raise self.failure
        self.pending.put((tar_id, first_row, first_index, offsets, member_bytes.sum(axis=1), sizes))

    def _insert_all(self) -> None:
        """In the thread: the schema, every block's rows, the indexes and the commit."""
        db = None
        item: tuple[Any, ...] | None = ()
        try:
            db = sqlite3.connect(self.meta / "index.sqlite", check_same_thread=False)
            # no tar is synced either, and a failed export's OUT is removed: no journal, no syncs
            db.execute("PRAGMA synchronous = OFF")
            db.execute("PRAGMA journal_mode = OFF")
            for statement in CREATE_TABLES + CREATE_INDEXES:  # indexes built as the rows come, in key order
                db.execute(statement)
            while (item := self.pending.get()) is not None:
                _insert_block(db, *item)
            db.commit()
            db.close()
        except BaseException as exc:  # handed to the export's thread
            self.failure = exc
            if db is not None:
                db.close()
            while item is not None:  # the export's thread must not wait on a full queue
                item = self.pending.get()

    def close_tar(self, tar: _TarShard) -> None:
        """The tar's `.tar.idx` ends with where its members end."""
        if self.itar is not None:
            self.itar.write(np.array([tar.position], dtype="<u8").tobytes())
            self.itar.close()
            self.itar = None

    def finish(self) -> None:
        """The commit, then the documents energon writes after it."""
        self.pending.put(None)
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        with open(self.meta / ".info.json", "w", encoding="utf-8") as f:
            json.dump({"energon_version": ENERGON_VERSION, "shard_counts": self.counts}, f, indent=2)
        (self.meta / "split.yaml").write_text(split_yaml(list(self.counts)), encoding="utf-8")
        self.digest.update(json.dumps(self.counts).encode())
        (self.meta / "index.uuid").write_text(str(uuid.UUID(bytes=self.digest.digest()[:16], version=4)))
        (self.meta / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")

    def abandon(self) -> None:
        """Close what is open (the output directory is removed)."""
        if self.itar is not None:
            self.itar.close()
        self.pending.put(None)
        self.thread.join()


_NUMBERED = re.compile(r"(.*?)(\d+)(\D*)")


def brace_ranges(names: list[str]) -> list[str]:
    """The names in order, each run of two or more whose numbers follow one another (same
    text around, same width) as one brace range: `shard-{00000..00003}.tar`, as energon
    writes split parts."""
    out: list[str] = []
    run: list[tuple[str, str, str]] = []

    def close() -> None:
        if len(run) == 1:
            out.append("".join(run[0]))
        elif run:
            (head, first, tail), last = run[0], run[-1][1]
            out.append(f"{head}{{{first}..{last}}}{tail}")
        run.clear()

    for name in names:
        match = _NUMBERED.fullmatch(name)
        if match is None:
            close()
            out.append(name)
            continue
        head, digits, tail = match.groups()
        if run:
            prev_head, prev_digits, prev_tail = run[-1]
            if (head, tail, len(digits)) != (prev_head, prev_tail, len(prev_digits)) or int(digits) != int(
                prev_digits
            ) + 1:
                close()
        run.append((head, digits, tail))
    close()
    return out


def split_yaml(tars: list[str]) -> str:
    """split.yaml with every tar in the train split, as energon's preparation writes it."""
    parts = brace_ranges(tars)
    train = "".join(f"  - {json.dumps(p) if _needs_quotes(p) else p}\n" for p in parts) if parts else ""
    return (
        "split_parts:\n" + ("  train:\n" + train if parts else "  train: []\n") + "  val: []\n  test: []\nexclude: []\n"
    )


def _needs_quotes(name: str) -> bool:
    """Whether a name is not a plain YAML scalar (packcli's own tar names always are)."""
    return not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.{}\-]*", name)


DIGITS = 20  # an int64 as fixed-width decimal text, for the inserts' blobs
_POWERS = 10 ** np.arange(DIGITS - 1, -1, -1, dtype=np.uint64)
_SERIES = "WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i + 1 < ?1) "
_PART_NAMES = " ".join(f"WHEN {c} THEN '{column}.npy'" for c, column in enumerate(COLUMNS))
INSERT_SAMPLES = (
    "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size) "
    + _SERIES
    + f"SELECT ?2, printf('%0{KEY_DIGITS}d', ?3 + i), ?4 + i, {{}}, {{}} FROM r ORDER BY i"
).format(*(f"CAST(substr(?5, {2 * DIGITS} * i + {1 + k * DIGITS}, {DIGITS}) AS INTEGER)" for k in (0, 1)))
INSERT_PARTS = (
    "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size) "
    + _SERIES
    + f"SELECT ?2, ?3 + i / {len(COLUMNS)}, CASE i % {len(COLUMNS)} {_PART_NAMES} END, {{}}, {{}} FROM r ORDER BY i"
).format(*(f"CAST(substr(?4, {2 * DIGITS} * i + {1 + k * DIGITS}, {DIGITS}) AS INTEGER)" for k in (0, 1)))


# energon's schema: its two tables and its three indexes (on rows that arrive in key
# order the indexes grow at their ends, in the thread, beside the tar writes)
CREATE_TABLES = (
    "CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE, "
    "sample_index INTEGER NOT NULL, byte_offset INTEGER, byte_size INTEGER)",
    "CREATE TABLE sample_parts (tar_file_id INTEGER, sample_index INTEGER, part_name TEXT, "
    "content_byte_offset INTEGER, content_byte_size INTEGER)",
)
CREATE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, "
    "content_byte_offset, content_byte_size)",
)


def _decimal_blob(*columns: np.ndarray) -> bytes:
    """Each row's values as DIGITS-digit decimals, row after row: what the inserts cut
    with substr (a blob, so that substr indexes bytes without scanning)."""
    values = np.stack([np.asarray(c, dtype=np.int64).ravel() for c in columns], axis=1).astype(np.uint64)
    return ((values[..., None] // _POWERS) % 10 + ord("0")).astype(np.uint8).tobytes()


def _insert_block(
    db: Any,
    tar_id: int,
    first_row: int,
    first_index: int,
    offsets: np.ndarray,
    row_bytes: np.ndarray,
    sizes: np.ndarray,
) -> None:
    """A block's rows of energon's two tables, in tar and sample order: one statement per table, its rows generated inside SQLite from a blob of the
    numbers, so the GIL is free while they are inserted (executemany takes it back for
    every row)."""
    n = len(sizes)
    if n == 0:
        return  # the series starts at 0 whatever its end
    db.execute(INSERT_SAMPLES, (n, tar_id, first_row, first_index, _decimal_blob(offsets[:, 0], row_bytes)))
    parts = _decimal_blob(offsets + tarfile.BLOCKSIZE, sizes)
    db.execute(INSERT_PARTS, (n * len(COLUMNS), tar_id, first_index, parts))


@fetching_source
def export_energon(
    source: Path | str, out: Path | str, *, overwrite: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Write OUT/shard-NNNNN.tar (each with its .tar.idx) and OUT/.nv-meta/; returns a summary."""
    manifest = read_source(source)
    ids_dtype = token_dtype(manifest)
    rows = tokens = 0
    tars: list[str] = []
    with ExportDir(out, overwrite, last=_upload_rank) as tmp:
        identity = [*COLUMNS, ids_dtype.str, *(entry["checksum"] for entry in manifest["shards"])]
        index = EnergonIndex(tmp, identity)
        tar: _TarShard | None = None
        try:
            for block in blocks(source, manifest, progress):
                if tar is None or block.shard != tar.shard:
                    if tar is not None:
                        _close_tar(tar, index)
                    tars.append(f"shard-{block.shard:05d}.tar")
                    tar = _TarShard(tmp / tars[-1], block.shard)
                _write_block(tar, block, ids_dtype, index)
                rows += len(block.rows)
                tokens += int(block.real.sum())
            if tar is not None:
                _close_tar(tar, index)
        except BaseException:
            if tar is not None:
                tar.file.close()
            index.abandon()
            raise
        index.finish()
    notes = dropped_columns(manifest)
    return {
        "format": "energon",
        "out": str(out),
        "rows": rows,
        "real_tokens": tokens,
        "files": len(tars),
        "notes": notes,
    }


def _upload_rank(name: str) -> int:
    """On an object store the tars go first, then `.nv-meta/`, `dataset.yaml` (what energon
    opens first) last."""
    return 2 if name == ".nv-meta/dataset.yaml" else int(name.startswith(".nv-meta/"))


def _close_tar(tar: _TarShard, index: EnergonIndex | None) -> None:
    tar.close()
    if index is not None:
        index.close_tar(tar)
