"""The token spill: every segment's tokens on disk, so memory holds a few bytes per sequence.

Read+tokenize appends segments (the pieces the planner places, after `--overlong`) in
input order: tokens in the output's id dtype and, where labels are masked, one bit per
token saying whether it is learned (a label is always its token or -100, so one bit
says it all). The lengths go to disk too, and only their histogram stays in memory
while the spill is written; rows are then gathered from the files block by block.

With `by_length` (bin mode planned from counts, one plan of the whole input) the tokens
are written in length order a chunk at a time: the writer holds about BY_LENGTH_CHUNK
tokens, lays them out by length (in input order inside each length) and writes them
together, and `chunks.npy` lists each chunk's sequences per length. The k-th sequence of
length L in input order (what the slot rule asks for) is then found by arithmetic on
that table (write/by_length.py), with no second pass over the spill to sort it. The
lengths stay in input order. The engine asks for it only where the first chunk's rows
would hold many sequences; otherwise the tokens go in input order from then on.

A spill is complete when `complete.json` exists (written last, atomically); `--resume`
reuses a complete spill whose run identity matches and skips reading and tokenizing.

Where the kernel names its boot (Linux), the spill is not fsynced: a process killed or
stopped leaves its written pages in the page cache, where the next run reads them, and
only a reboot can lose them. The record keeps the boot's id, and a spill from another
boot is not reused. The spill is removed as soon as its rows are gathered, and pages the
kernel has not written back by then never reach the disk. Elsewhere it is fdatasynced
as it is written.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.write.ranges import Ranges, read_exactly

TOKENS_FILE = "tokens.bin"
LEARNED_FILE = "learned.bin"
LENGTHS_FILE = "lengths.npy"
HISTOGRAM_FILE = "histogram.npy"
CHUNKS_FILE = "chunks.npy"  # by_length: int64 rows (chunk, length, sequences), chunks in order, lengths increasing
BY_LENGTH_CHUNK = 1 << 22  # tokens held and laid out by length at a time (by_length)
LENGTHS_HEADER = 128  # bytes reserved for lengths.npy's header, written when the count is known
HISTOGRAM_SIZE = 1 << 16  # the histogram counts lengths below this; longer ones in its last entry
COMPLETE_FILE = "complete.json"
SYNC_BYTES = 64 << 20  # written bytes between two background fdatasyncs
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """This boot's id, or None where the system does not say (the spill is then fsynced)."""
    try:
        return BOOT_ID_FILE.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def as_int_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` as contiguous integers of `dtype`: a view where only the signedness differs
    (the same bytes a cast gives, without the copy), else a cast."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind in "iu" and values.dtype.itemsize == dtype.itemsize:
        return values.view(dtype)
    return values.astype(dtype)


class _Chunk(NamedTuple):
    """Buffers of a chunk of tokens and their learned flags (one byte each), kept from
    chunk to chunk by a spill written by length."""

    tokens: np.ndarray
    flags: np.ndarray  # empty where the spill is not masked


class SpillWriter:
    """Appends segments to a spill directory; `finish` makes it complete."""

    def __init__(
        self,
        directory: Path,
        token_dtype: np.dtype,
        masked: bool,
        durable: bool = False,
        by_length: bool | Callable[[int, int], bool] = False,
    ):
        """`durable`: fsync the spill even where the boot has an id (a spill that another
        machine may resume from, after this one is gone). `by_length`: tokens in length
        order a chunk at a time (see the module docstring); a function is asked once, of
        the first chunk's tokens and sequences, whether to write so, or in input order."""
        self.directory = Path(directory)
        self._by_length = by_length
        # by_length: the chunk so far (tokens and flags in buffers kept from chunk to chunk)
        self._held_tokens = 0
        self._held_lengths: list[np.ndarray] = []
        self._held: _Chunk | None = None  # as appended
        self._laid: _Chunk | None = None  # by length
        self._chunk_rows: list[np.ndarray] = []  # by_length: each chunk's (chunk, length, sequences) rows
        self.token_dtype, self.masked = np.dtype(token_dtype), masked
        remove_spill(self.directory)
        self.directory.mkdir(parents=True)
        self._tokens = open(self.directory / TOKENS_FILE, "wb")
        self._learned = open(self.directory / LEARNED_FILE, "wb") if masked else None
        self._carry = np.zeros(0, dtype=bool)  # learned flags that do not fill a byte yet
        # lengths go to disk as they come (an .npy file whose header is written last), and
        # only their histogram stays here: memory holds nothing per sequence
        self._lengths = open(self.directory / LENGTHS_FILE, "wb")
        self._lengths.write(b"\0" * LENGTHS_HEADER)
        self.histogram = np.zeros(HISTOGRAM_SIZE, dtype=np.int64)
        self.tokens = 0
        self.sequences = 0
        self.boot = None if durable else boot_id()
        # Without a boot id the spill goes to disk while it is written, not all at once in
        # `finish`: its final fsync would otherwise wait for the whole file (seconds per GB)
        # before any row is built.
        self._syncing: ThreadPoolExecutor | None = None
        self._sync: Future[None] | None = None
        self._unsynced = 0

    def append(self, tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None) -> None:
        """`learned`: one flag per token (required exactly when the spill is masked)."""
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        if self._by_length:
            self._hold(as_int_dtype(tokens, self.token_dtype), lengths, learned)
        else:
            self._write_tokens(as_int_dtype(tokens, self.token_dtype), learned)
        self._lengths.write(lengths.data)
        if len(lengths):
            self.histogram += np.bincount(np.minimum(lengths, HISTOGRAM_SIZE - 1), minlength=HISTOGRAM_SIZE)
        self.tokens += len(tokens)
        self.sequences += len(lengths)
        if self.boot is None:
            self._unsynced += len(tokens) * self.token_dtype.itemsize
            if self._unsynced >= SYNC_BYTES and (self._sync is None or self._sync.done()):
                self._start_sync()

    def _write_tokens(self, tokens: np.ndarray, learned: np.ndarray | None) -> None:
        self._tokens.write(tokens.data)
        if self._learned is not None:
            flags = np.concatenate([self._carry, np.asarray(learned, dtype=bool)])
            whole = len(flags) - len(flags) % 8
            self._learned.write(np.packbits(flags[:whole], bitorder="little").data)
            self._carry = flags[whole:]

    def _hold(self, tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None) -> None:
        n = len(tokens)
        if self._held_tokens and self._held_tokens + n > BY_LENGTH_CHUNK:
            self._write_chunk()
            if not self._by_length:  # the first chunk chose input order
                self._write_tokens(tokens, learned)
                return
        if self._held is None or len(self._held.tokens) < n:
            size = max(BY_LENGTH_CHUNK, n)
            self._held = _Chunk(np.empty(size, self.token_dtype), np.empty(size if self.masked else 0, np.uint8))
        at = self._held_tokens
        self._held.tokens[at : at + n] = tokens
        if self.masked:
            self._held.flags[at : at + n] = np.asarray(learned, dtype=bool).view(np.uint8)
        self._held_lengths.append(lengths.copy())  # the caller may reuse its buffers
        self._held_tokens = at + n

    def _write_chunk(self) -> None:
        """The held segments written in length order (input order inside each), or, if the
        first chunk decides against it, in input order from then on."""
        n, self._held_tokens = self._held_tokens, 0
        if not self._held_lengths:
            return
        lengths = np.concatenate(self._held_lengths)
        self._held_lengths = []
        assert self._held is not None  # segments are held
        tokens, flags = self._held.tokens[:n], self._held.flags[:n]
        if callable(self._by_length):
            self._by_length = self._by_length(n, len(lengths))
            if not self._by_length:
                self._write_tokens(tokens, flags.view(bool) if self.masked else None)
                self._held = None
                return
        if self._laid is None or len(self._laid.tokens) < n:
            self._laid = _Chunk(np.empty_like(self._held.tokens), np.empty_like(self._held.flags))
        top = int(lengths.max())
        buckets = np.arange(top + 1, dtype=np.int64)  # each length its own bucket, records its size
        laid, laid_flags = self._laid.tokens[:n], self._laid.flags[:n]
        kernel(lay_out_by_bucket, n)(tokens, lengths, lengths, buckets, laid)
        if self.masked:
            kernel(lay_out_by_bucket, n)(flags, lengths, lengths, buckets, laid_flags)
        counts = np.bincount(lengths, minlength=top + 1)
        present = np.flatnonzero(counts)
        chunk = np.full(len(present), len(self._chunk_rows), dtype=np.int64)
        self._chunk_rows.append(np.stack([chunk, present, counts[present]], axis=1))
        self._write_tokens(laid, laid_flags.view(bool) if self.masked else None)

    def _start_sync(self) -> None:
        """fdatasync what is written so far, on a thread (a failure shows in `finish`)."""
        if self._sync is not None:
            self._sync.result()
        if self._syncing is None:
            self._syncing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packcli-spill-sync")
        fds = [f.fileno() for f in (self._tokens, self._learned, self._lengths) if f is not None]
        self._sync = self._syncing.submit(_datasync, fds)
        self._unsynced = 0

    def _stop_sync(self) -> None:
        """Wait for a sync under way (before the files close) and stop its thread."""
        try:
            if self._sync is not None:
                self._sync.result()
        finally:
            self._sync = None
            if self._syncing is not None:
                self._syncing.shutdown()
                self._syncing = None

    def finish(self, meta: dict[str, Any]) -> Spill:
        """Flush, record the lengths and `meta`, and mark the spill complete."""
        if self._by_length:
            self._write_chunk()
        by_length = self._by_length is True  # False where the first chunk chose input order, or nothing came
        if by_length:
            rows = np.concatenate(self._chunk_rows) if self._chunk_rows else np.zeros((0, 3), dtype=np.int64)
            np.save(self.directory / CHUNKS_FILE, rows)
        if self._learned is not None and len(self._carry):
            self._learned.write(np.packbits(self._carry, bitorder="little").data)
        self._stop_sync()
        self._lengths.seek(0)
        self._lengths.write(_npy_header(self.sequences))
        for f in (self._tokens, self._learned, self._lengths):
            if f is not None:
                f.flush()
                if self.boot is None:
                    os.fsync(f.fileno())
                f.close()
        used = np.flatnonzero(self.histogram)
        np.save(self.directory / HISTOGRAM_FILE, self.histogram[: int(used[-1]) + 1 if len(used) else 0])
        record = {
            "token_dtype": self.token_dtype.str,
            "masked": self.masked,
            "tokens": self.tokens,
            "sequences": self.sequences,
            "boot_id": self.boot,
            "by_length": by_length,
            **meta,
        }
        tmp = self.directory / (COMPLETE_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, self.directory / COMPLETE_FILE)
        return Spill.open(self.directory)

    def abort(self) -> None:
        self._held_lengths, self._held, self._laid = [], None, None
        try:
            self._stop_sync()
        except OSError:
            pass  # the run is failing already; its own error is the one to show
        for f in (self._tokens, self._learned, self._lengths):
            if f is not None and not f.closed:
                f.close()


@dataclass
class Block:
    """The tokens (and learned bits) a block of rows needs, with where each piece starts."""

    tokens: np.ndarray
    token_at: np.ndarray  # int64, per piece: index of its first token in `tokens`
    learned: np.ndarray | None  # packed bits, little bit order
    bit_at: np.ndarray  # int64, per piece: index of its first bit in `learned`


class SpillFiles(NamedTuple):
    """A spill's files open for reading."""

    tokens: BinaryIO
    learned: BinaryIO | None  # the learned bits of a masked spill


@dataclass
class Spill:
    """A complete spill: tokens, learned bits and lengths on disk (or in memory). The lengths
    are read into memory the first time `lengths` is asked for; `sequences`, `tokens` and
    `histogram` need no lengths, and `length_batches` reads them a batch at a time.

    Blocks are read with positioned reads (write/ranges.py), not through a memory map."""

    loaded: np.ndarray | None  # int64, one per segment, in input order (None: not read yet)
    token_dtype: np.dtype
    masked: bool
    meta: dict[str, Any] = field(default_factory=dict)
    directory: Path | None = None
    arrays: tuple[np.ndarray, np.ndarray | None] | None = None  # (tokens, packed bits) of an in-memory spill
    _files: SpillFiles | None = None
    _lengths_fd: int | None = None
    chunks: np.ndarray | None = None  # by_length: CHUNKS_FILE's rows (chunk, length, sequences)

    @property
    def lengths(self) -> np.ndarray:
        if self.loaded is None:
            assert self.directory is not None
            self.loaded = np.load(self.directory / LENGTHS_FILE)
        return self.loaded

    @property
    def sequences(self) -> int:
        return len(self.loaded) if self.loaded is not None else int(self.meta["sequences"])

    def length_batches(self, size: int) -> Iterator[np.ndarray]:
        """The lengths in input order, `size` at a time, read from disk unless in memory."""
        if self.loaded is not None or self.directory is None:
            for first in range(0, len(self.lengths), size):
                yield self.lengths[first : first + size]
            return
        with open(self.directory / LENGTHS_FILE, "rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            while True:
                chunk = np.fromfile(f, dtype=np.int64, count=size)
                if not len(chunk):
                    return
                yield chunk

    def read_lengths(self, first: int, count: int) -> np.ndarray:
        """Lengths of segments [first, first + count), from disk unless in memory."""
        if self.loaded is not None or self.directory is None:
            return self.lengths[first : first + count]
        out = np.empty(count, dtype=np.int64)
        if self._lengths_fd is None:
            self._lengths_fd = os.open(self.directory / LENGTHS_FILE, os.O_RDONLY)
        read_exactly(self._lengths_fd, out.view(np.uint8).data, LENGTHS_HEADER + 8 * first)
        return out

    @property
    def histogram(self) -> np.ndarray:
        """Segments per length (lengths of HISTOGRAM_SIZE - 1 and more in the last entry)."""
        if self.directory is not None and self.loaded is None:
            histogram: np.ndarray = np.load(self.directory / HISTOGRAM_FILE)
            return histogram
        return np.bincount(np.minimum(self.lengths, HISTOGRAM_SIZE - 1))

    def starts(self) -> np.ndarray:
        starts = np.empty(len(self.lengths), dtype=np.int64)
        if len(starts):
            starts[0] = 0
            np.cumsum(self.lengths[:-1], out=starts[1:])
        return starts

    @property
    def tokens(self) -> int:
        return int(self.meta["tokens"]) if "tokens" in self.meta else int(self.lengths.sum())

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block:
        """The pieces [start, start + length) of the token stream, read together."""
        if self.arrays is not None:
            tokens, bits = self.arrays
            return Block(tokens, starts, bits, starts)
        return self.read_ranges(Ranges.sorted(starts, lengths))

    def read_ranges(self, ranges: Ranges) -> Block:
        """The block of pieces `ranges` groups (positions in the spill's files)."""
        files = self.open_files()
        tokens, token_offsets = ranges.read(files.tokens, self.token_dtype, ranges.start, ranges.end)
        token_at = ranges.per_piece(token_offsets - ranges.start)
        block = Block(tokens, token_at, None, token_at)
        if files.learned is not None:
            first_byte, end_byte = ranges.start // 8, (ranges.end + 7) // 8
            bits, byte_offsets = ranges.read(files.learned, np.dtype(np.uint8), first_byte, end_byte)
            block.learned, block.bit_at = bits, ranges.per_piece(byte_offsets * 8 - first_byte * 8)
        return block

    def read_tokens(self, first: int, count: int) -> np.ndarray:
        """Tokens [first, first + count) of its file, in the order the spill holds them."""
        return self._read_file(self.open_files().tokens, self.token_dtype, first, count)

    def read_learned_bytes(self, first: int, count: int) -> np.ndarray:
        """Bytes [first, first + count) of its learned bits (eight tokens a byte)."""
        learned = self.open_files().learned
        assert learned is not None  # a masked spill
        return self._read_file(learned, np.dtype(np.uint8), first, count)

    @staticmethod
    def _read_file(f: BinaryIO, dtype: np.dtype, first: int, count: int) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        read_exactly(f.fileno(), out.view(np.uint8).data, first * dtype.itemsize)
        return out

    def open_files(self) -> SpillFiles:
        """Open the spill's files for `read_block` (which opens them itself when needed);
        threads may then read blocks at the same time (positioned reads share no offset)."""
        if self._files is not None:
            return self._files
        assert self.directory is not None  # a spill is either in memory or in a directory
        if self._lengths_fd is None and self.loaded is None:
            self._lengths_fd = os.open(self.directory / LENGTHS_FILE, os.O_RDONLY)
        learned = open(self.directory / LEARNED_FILE, "rb") if self.masked else None
        self._files = SpillFiles(open(self.directory / TOKENS_FILE, "rb"), learned)
        return self._files

    def close(self) -> None:
        files, self._files = self._files, None
        for f in files or ():
            if f is not None:
                f.close()
        fd, self._lengths_fd = self._lengths_fd, None
        if fd is not None:
            os.close(fd)

    @staticmethod
    def open(directory: Path) -> Spill:
        """The spill in `directory`, its lengths left on disk (checked against the record by
        their count and histogram)."""
        directory = Path(directory)
        meta = json.loads((directory / COMPLETE_FILE).read_text(encoding="utf-8"))
        dtype = np.dtype(meta["token_dtype"])
        size = (directory / TOKENS_FILE).stat().st_size
        with open(directory / LENGTHS_FILE, "rb") as f:
            np.lib.format.read_magic(f)
            shape = np.lib.format.read_array_header_1_0(f)[0]
        histogram = np.load(directory / HISTOGRAM_FILE)
        if (
            size != meta["tokens"] * dtype.itemsize
            or shape != (meta["sequences"],)
            or int(histogram.sum()) != meta["sequences"]
            or (len(histogram) < HISTOGRAM_SIZE and int(histogram @ np.arange(len(histogram))) != meta["tokens"])
        ):
            raise PackcliError(f"{directory}: the token spill does not match its record; remove it and run again")
        chunks = None
        if meta.get("by_length"):
            chunks = np.load(directory / CHUNKS_FILE).reshape(-1, 3)
            if int(chunks[:, 2].sum()) != meta["sequences"] or int(chunks[:, 1] @ chunks[:, 2]) != meta["tokens"]:
                raise PackcliError(f"{directory}: the token spill does not match its record; remove it and run again")
        return Spill(None, dtype, bool(meta["masked"]), meta, directory, chunks=chunks)

    @staticmethod
    def in_memory(tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None) -> Spill:
        """The same interface over arrays (the Python API packs without touching disk)."""
        tokens = np.ascontiguousarray(tokens)
        bits = None if learned is None else np.packbits(np.asarray(learned, dtype=bool), bitorder="little")
        return Spill(np.asarray(lengths, dtype=np.int64), tokens.dtype, bits is not None, arrays=(tokens, bits))


@njit(cache=True, nogil=True)  # on the sort threads and the spill writer's
def lay_out_by_bucket(
    source: np.ndarray, lengths: np.ndarray, bucket: np.ndarray, bucket_len: np.ndarray, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk's sequences laid out in `out` by bucket (increasing), in input order inside
    each, each in a record of its bucket's length (its tokens, then zeros). Returns the
    buckets present, where each one's records start in `out` and their total size."""
    n_buckets = bucket_len.shape[0]
    count = np.zeros(n_buckets, dtype=np.int64)
    for i in range(lengths.shape[0]):
        count[bucket[i]] += 1
    at = np.zeros(n_buckets, dtype=np.int64)
    n_runs = 0
    for b in range(n_buckets):
        if count[b]:
            n_runs += 1
    run_bucket = np.empty(n_runs, dtype=np.int64)
    run_at = np.empty(n_runs, dtype=np.int64)
    run_size = np.empty(n_runs, dtype=np.int64)
    position = 0
    k = 0
    for b in range(n_buckets):
        if count[b]:
            at[b] = position
            run_bucket[k] = b
            run_at[k] = position
            run_size[k] = count[b] * bucket_len[b]
            position += run_size[k]
            k += 1
    s = 0
    for i in range(lengths.shape[0]):
        b = bucket[i]
        n = lengths[i]
        d = at[b]
        for j in range(n):
            out[d + j] = source[s + j]
        for j in range(n, bucket_len[b]):
            out[d + j] = 0
        at[b] = d + bucket_len[b]
        s += n
    return run_bucket, run_at, run_size


def _npy_header(count: int) -> bytes:
    """The header of an .npy file of `count` int64, LENGTHS_HEADER bytes long."""
    text = "{'descr': '<i8', 'fortran_order': False, 'shape': (" + str(count) + ",), }"
    text = text.ljust(LENGTHS_HEADER - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")


def _datasync(fds: list[int]) -> None:
    for fd in fds:
        os.fdatasync(fd)


def open_complete(directory: Path, run_id: str) -> Spill | None:
    """The spill in `directory` if it is complete and was made by the same run, and is not
    an unsynced spill from an earlier boot, else None."""
    record = Path(directory) / COMPLETE_FILE
    try:
        meta = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("run_id") != run_id:
        return None
    if meta.get("boot_id") is not None and meta["boot_id"] != boot_id():
        return None
    try:
        return Spill.open(directory)
    except (OSError, ValueError, KeyError, PackcliError):
        return None


def spill_size(directory: Path) -> int:
    directory = Path(directory)
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) if directory.is_dir() else 0


def remove_spill(directory: Path) -> None:
    for path in (Path(directory), _retired(directory)):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _retired(directory: Path) -> Path:
    directory = Path(directory)
    return directory.with_name(directory.name + ".removing")


def start_removal(directory: Path) -> threading.Thread:
    """Remove a spill on a thread (join it): the directory is renamed first, so nothing
    of it is found again whatever point the removal reaches; freeing a GB of the
    spill's pages and blocks takes about as long as the fsyncs it then overlaps."""
    directory, retired = Path(directory), _retired(directory)
    if directory.is_dir():
        remove_spill(retired)
        os.replace(directory, retired)
    thread = threading.Thread(target=remove_spill, args=(retired,), name="packcli-spill-removal", daemon=True)
    thread.start()
    return thread
