"""The spill in (group, placed length) order: where the slot rule finds its sequences.

The plan from counts (plan/patterns.py) fills the k-th slot of placed length L (of a
--group-by group) with the k-th sequence of that length in input order. This module
copies the spill into that order once it is written (its sorted copy), by an external
counting sort: the spill is read in large sequential chunks, each chunk's sequences are
laid out by bucket (group, placed length) in memory, and each bucket's share is written
with one positioned write at its place, which the histogram fixes in advance
(SORT_THREADS chunks at a time).
Every sequence takes a record of exactly its placed length (its real tokens, then
zeros), so the sequence of rank k starts at `bucket_token[b] + (k - bucket_rank[b]) * L`:
the slot -> spill map is arithmetic, with nothing kept per sequence. And the slots of one
length in a row take consecutive ranks, so a row of hundreds of tiny sequences is a few
contiguous ranges of this file, not hundreds of scattered pieces of the spill. Learned
flags (masked labels) are copied as one byte per token.

A spill written by length a chunk at a time (SpillWriter's `by_length`) needs no copy:
each chunk holds its sequences of each length in input order, so bucket b's sequences
are chunk 0's, then chunk 1's, ..., and the plan `in_parts` of `chunk_parts` places its
slots in the spill itself, where `SpillByLength` reads them (its `placing` gives the plan
that). Only when the chunks x lengths table would not be small (CHUNK_TABLE_CELLS) is
such a spill copied as above.

`open_reader` makes that choice for the write step: the reader of a plan's pieces (the
spill as it is, its chunks, or its sorted copy) and the plan placed in it.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.plan.buckets import BucketParts, Buckets
from packcli.plan.contract import Plan
from packcli.plan.patterns import PatternPlan, SlotMap
from packcli.write.ranges import Ranges
from packcli.write.spill import Block, Spill, lay_out_by_bucket

SORTED_TOKENS_FILE = "by_length.bin"
SORTED_LEARNED_FILE = "by_length_learned.bin"
CHUNK_TOKENS = 1 << 22  # tokens of the spill read, sorted and written at a time
LENGTH_BATCH = 1 << 20  # lengths read from the spill at a time
SORT_THREADS = 2  # chunks sorted at the same time
READ_GAP = 64  # tokens: a block's ranges closer than this are read as one
CHUNK_TABLE_CELLS = 1 << 20  # chunks x buckets a SpillByLength holds (three int64 tables of it)


class Reader(Protocol):
    """Where the write step gathers rows from (gather.BlockReader), closed when it is done."""

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block: ...

    def close(self) -> None: ...


def open_reader(
    spill: Spill, plan: Plan, seq_len: int, multiple: int, groups: np.ndarray | None = None
) -> tuple[Reader, Plan]:
    """The reader of a plan's pieces and the plan placed in it. A plan whose slots are
    found by bucket reads the chunks of a spill written by length in place, or else the
    spill's sorted copy (made here); a plan through a slot map of a spill written by
    length gets the map in the spill's own order; any other plan reads the spill as it is
    (closing that reader closes the spill's files, which a later read opens again).
    `groups`: each segment's --group-by id (the sorted copy's order)."""
    if isinstance(plan, PatternPlan) and isinstance(plan.lookup, Buckets):
        parts = chunk_parts(spill, plan.lookup) if spill.chunks is not None else None
        if parts is not None:  # written by length: no copy to make, the slots placed in the spill
            chunked = SpillByLength(spill, parts)
            return chunked, chunked.placing(plan)
        return sort_spill(spill, plan.lookup, seq_len, multiple, groups), plan
    if spill.chunks is None:
        return spill, plan
    # written by length, planned through a slot map (rows of few sequences): the map in
    # the spill's own order
    if not isinstance(plan, PatternPlan) or not isinstance(plan.lookup, SlotMap) or plan.slot_real is not None:
        raise PackcliError(f"internal: a {type(plan).__name__} cannot read a spill written by length")
    return spill, replace(plan, lookup=SlotMap(file_slot_starts(spill)))


def sort_spill(
    spill: Spill,
    buckets: Buckets,
    seq_len: int,
    multiple: int,
    groups: np.ndarray | None = None,
    durable: bool = False,
    threads: int = SORT_THREADS,
) -> SortedCopy:
    """Copy `spill` into bucket order (see the module docstring). `groups`: each segment's
    group id (--group-by), or None. `durable`: the copy is fsynced before it is returned.
    `threads`: chunks sorted at a time (a Ray task has one CPU)."""
    assert spill.directory is not None  # the engines' spills are on disk
    spill.open_files()
    total = int(buckets.token[-1])
    directory = spill.directory
    names = [SORTED_TOKENS_FILE] + ([SORTED_LEARNED_FILE] if spill.masked else [])
    dtypes = [spill.token_dtype] + ([np.dtype(np.uint8)] if spill.masked else [])
    outs: list[int] = []
    try:
        for name, dtype in zip(names, dtypes):
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            outs.append(fd)
            os.ftruncate(fd, total * dtype.itemsize)
        chunk = _ChunkSorter(spill, buckets, outs, dtypes)
        cursor = np.zeros(len(buckets.key), dtype=np.int64)
        present = np.zeros(0, dtype=np.int64) if groups is None else np.flatnonzero(np.bincount(groups))
        done, token = 0, 0  # sequences and tokens sorted so far
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="packcli-sort") as pool:
            running: deque[Future[None]] = deque()
            for lengths in _lengths_in_file_order(spill):
                first = 0
                while first < len(lengths):
                    last = kernel(_chunk_end, CHUNK_TOKENS)(lengths, first, CHUNK_TOKENS)
                    own = lengths[first:last]
                    placed = (own + multiple - 1) // multiple * multiple
                    key = placed
                    if groups is not None:  # the group's place among the plan's groups (by id)
                        key = np.searchsorted(present, groups[done + first : done + last]) * (seq_len + 1) + placed
                    bucket = np.searchsorted(buckets.key, key)
                    if len(bucket) and (bucket.max() >= len(buckets.key) or not (buckets.key[bucket] == key).all()):
                        raise PackcliError("the spill's lengths do not match the plan's histogram")
                    n_tokens = int(own.sum())
                    running.append(pool.submit(chunk.sort, token, n_tokens, own, bucket, cursor.copy()))
                    cursor += np.bincount(bucket, minlength=len(cursor))
                    first, token = last, token + n_tokens
                    while len(running) > threads:  # at most one chunk waits: memory stays a few chunks
                        running.popleft().result()
                done += len(lengths)
            while running:
                running.popleft().result()
        if durable:
            for fd in outs:
                os.fsync(fd)
    finally:
        for fd in outs:
            os.close(fd)
    return SortedCopy.open(spill, buckets)


class _ChunkSorter:
    """One chunk of the spill read, laid out by bucket and written at its places: chunks
    are independent once their buckets' cursors are known, so threads sort them side by
    side (the kernel releases the GIL; reads and writes are positioned)."""

    def __init__(self, spill: Spill, buckets: Buckets, outs: list[int], dtypes: list[np.dtype]):
        self.spill, self.buckets, self.outs, self.dtypes = spill, buckets, outs, dtypes

    def sort(self, token: int, n_tokens: int, lengths: np.ndarray, bucket: np.ndarray, cursor: np.ndarray) -> None:
        spill, buckets = self.spill, self.buckets
        sources = [spill.read_tokens(token, n_tokens)]
        if spill.masked:
            sources.append(_learned_flags(spill, token, n_tokens))
        for fd, source, dtype in zip(self.outs, sources, self.dtypes):
            out = np.empty(int(buckets.length[bucket].sum()), dtype=dtype)
            run_bucket, run_at, run_size = kernel(lay_out_by_bucket, n_tokens)(
                source, lengths, bucket, buckets.length, out
            )
            item = dtype.itemsize
            view = out.view(np.uint8).data
            for b, at, size in zip(run_bucket.tolist(), run_at.tolist(), run_size.tolist()):
                where = int(buckets.token[b]) + int(cursor[b]) * int(buckets.length[b])
                _write_exactly(fd, view[at * item : (at + size) * item], where * item)


def _lengths_in_file_order(spill: Spill) -> Iterator[np.ndarray]:
    """The segments' lengths in the order of their tokens in the spill: input order, or for
    a spill written by length, each chunk's by length (input order inside each)."""
    if spill.chunks is None:
        yield from spill.length_batches(LENGTH_BATCH)
        return
    rows = spill.chunks
    ends = np.flatnonzero(np.diff(rows[:, 0], append=-1)) + 1
    first = 0
    for end in ends.tolist():
        yield np.repeat(rows[first:end, 1], rows[first:end, 2])
        first = end


def _learned_flags(spill: Spill, first: int, count: int) -> np.ndarray:
    """The learned flags of tokens [first, first + count), one byte each."""
    lo, hi = first // 8, (first + count + 7) // 8
    bits = spill.read_learned_bytes(lo, hi - lo)
    flags = np.unpackbits(bits, bitorder="little")
    return flags[first - lo * 8 : first - lo * 8 + count]


def _write_exactly(fd: int, buffer: memoryview, position: int) -> None:
    while len(buffer):
        n = os.pwrite(fd, buffer, position)
        buffer, position = buffer[n:], position + n


@njit(cache=True)
def _chunk_end(lengths, first, budget):
    """The end of the chunk from `first`: as many sequences as fit in `budget` tokens, at least one."""
    total = lengths[first]
    last = first + 1
    while last < lengths.shape[0] and total + lengths[last] <= budget:
        total += lengths[last]
        last += 1
    return last


class SortedCopy:
    """Reads blocks of the sorted copy (the BlockReader the gather takes): pieces are
    given in its coordinates (Buckets.starts), learned flags come back packed."""

    def __init__(self, spill: Spill, buckets: Buckets, tokens_fd: int, learned_fd: int | None):
        """`tokens_fd`, `learned_fd`: the copy's files, open for reading (the learned flags'
        of a masked spill); they are this reader's to close."""
        self.spill, self.buckets = spill, buckets
        self._tokens_fd, self._learned_fd = tokens_fd, learned_fd
        self.token_dtype = spill.token_dtype

    @staticmethod
    def open(spill: Spill, buckets: Buckets) -> SortedCopy:
        assert spill.directory is not None
        learned = os.open(spill.directory / SORTED_LEARNED_FILE, os.O_RDONLY) if spill.masked else None
        return SortedCopy(spill, buckets, os.open(spill.directory / SORTED_TOKENS_FILE, os.O_RDONLY), learned)

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block:
        ranges = Ranges.in_order(starts, lengths, READ_GAP)
        tokens, token_offsets = ranges.read_fd(self._tokens_fd, self.token_dtype, ranges.start, ranges.end)
        token_at = ranges.per_piece(token_offsets - ranges.start)
        block = Block(tokens, token_at, None, token_at)
        if self._learned_fd is not None:
            flags, _ = ranges.read_fd(self._learned_fd, np.dtype(np.uint8), ranges.start, ranges.end)
            block.learned = np.packbits(flags, bitorder="little")
        return block

    def close(self) -> None:
        fds = (self._tokens_fd, self._learned_fd)
        self._tokens_fd, self._learned_fd = -1, None  # closed: a read fails
        for fd in fds:
            if fd is not None and fd >= 0:
                os.close(fd)


def chunk_parts(spill: Spill, buckets: Buckets) -> BucketParts | None:
    """The chunks of a spill written by length as BucketParts of `buckets` (whose keys are
    plain lengths: no --group-by or --pad-to-multiple-of), positions in the spill's
    tokens; None when the table would pass CHUNK_TABLE_CELLS."""
    rows = spill.chunks
    assert rows is not None  # a spill written by length
    n_chunks = int(rows[-1, 0]) + 1 if len(rows) else 0
    if n_chunks * len(buckets.key) > CHUNK_TABLE_CELLS:
        return None
    bucket = np.searchsorted(buckets.key, rows[:, 1])
    if len(bucket) and (bucket.max() >= len(buckets.key) or not (buckets.key[bucket] == rows[:, 1]).all()):
        raise PackcliError("the spill's lengths do not match the plan's histogram")
    counts = np.zeros((n_chunks, len(buckets.key)), dtype=np.int64)
    counts[rows[:, 0], bucket] = rows[:, 2]
    if not (counts.sum(axis=0) == np.diff(buckets.rank)).all():
        raise PackcliError("the spill's lengths do not match the plan's histogram")
    return BucketParts.end_to_end(buckets, counts)


class SpillByLength:
    """Reads blocks of a spill written by length (the BlockReader the gather takes), the
    pieces given in the spill's own coordinates, where `placing` has a plan put them
    (`parts`: chunk_parts of the spill), and read in runs in the order given, as
    SortedCopy reads its file."""

    def __init__(self, spill: Spill, parts: BucketParts):
        self.spill, self.parts = spill, parts

    def placing(self, plan: PatternPlan) -> PatternPlan:
        """The plan with its slots placed in the spill's chunks, where `read_block` reads."""
        return plan.in_parts(self.parts)

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block:
        return self.spill.read_ranges(Ranges.in_order(starts, lengths, READ_GAP))

    def close(self) -> None:
        """The spill's files are the spill's to close."""


def file_slot_starts(spill: Spill) -> np.ndarray:
    """The slot map of a spill written by length, in the spill's coordinates: the start of
    every sequence, sorted by length and in input order inside each (what
    patterns.slot_map gives for a spill in input order)."""
    rows = spill.chunks
    assert rows is not None  # a spill written by length
    histogram = np.bincount(rows[:, 1], weights=rows[:, 2], minlength=1).astype(np.int64)
    rank_base = np.cumsum(histogram) - histogram
    out = np.empty(int(histogram.sum()), dtype=np.int64)
    kernel(_file_slot_starts, len(out) + len(rows))(rows, rank_base, out)
    return out


@njit(cache=True)
def _file_slot_starts(rows, rank_base, out):
    cursor = rank_base.copy()
    position = 0
    for i in range(rows.shape[0]):
        n, count = rows[i, 1], rows[i, 2]
        k = cursor[n]
        for j in range(count):
            out[k + j] = position
            position += n
        cursor[n] = k + count
