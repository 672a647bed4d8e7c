"""Bin-packing kernels: assign sequence lengths to fixed-capacity rows.

Public API (the only names other modules use):

    ALGORITHMS: tuple[str, ...]            # ("nf", "ff", "ffd", "bfd", "spfhp", "lpfhp")
    DEFAULT_ALGORITHM = "bfd"

    @dataclass(frozen=True)
    class PackedLengths:
        row: np.ndarray     # int32 [n]: row of each sequence; rows are numbered 0..n_rows-1
        offset: np.ndarray  # int32 [n]: first token of the sequence inside its row
        n_rows: int

    def pack_lengths(lengths, capacity, algorithm="bfd", seed=0, max_sequences_per_row=None) -> PackedLengths
    def improve_rows(lengths, placed, capacity, budget=None) -> PackedLengths  # fewer rows
    def plan_lengths(lengths, capacity, algorithm="bfd", seed=0, max_sequences_per_row=None) -> PackedLengths
        # pack_lengths, then improve_rows for IMPROVED_ALGORITHMS: what `pack` uses
    def bfd_rows_from_counts(counts, capacity) -> int        # bfd's row count, from counts
    def lower_bound_rows(lengths, capacity) -> int           # ceil(sum / capacity)
    def martello_toth_l2(lengths, capacity) -> int           # a tighter lower bound

Contract of pack_lengths: every length must be an integer in [1, capacity] (else
PackcliError); inside each row, sequences sit back to back from offset 0 with no gap, in
the order they were placed; same input, algorithm and seed give the same PackedLengths.
Rows are numbered in the order they were opened. No algorithm here is randomised, so
``seed`` is accepted (the CLI passes it through) but currently changes nothing.

Each algorithm is a private ``@njit(cache=True)`` kernel over plain arrays (int64
lengths in, int32 row and offset out) that trusts its input; this module is the only
place that validates. The kernels live by family:

    fit.py        nf, ff, ffd, bfd
    histogram.py  spfhp, lpfhp
    cap.py        nf, ff, ffd, bfd with a cap on sequences per row (the histogram
                  packers take the cap themselves)
    runs.py       the length histogram and the runs that bfd and the histogram packers
                  place sequences with
    bitset.py     the room index (a hierarchical bitset) and bit intrinsics
    improve.py    the repair pass after a packer (improve_rows)

numba caches each compiled function by its own file only: after editing a helper module,
clear packcli/plan/kernels/__pycache__ so that the kernels that inline it are compiled again. The
algorithms, their tie-breaking rules and their costs are described in docs/kernels.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packcli.core.choices import ALGORITHMS
from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.plan.kernels.fit import _bfd_kernel, _bfd_plan, _ff_kernel, _ffd_kernel, _nf_kernel
from packcli.plan.kernels.improve import _improve_kernel

# kernels_cap and kernels_histogram are imported where a call needs them: a run of the
# default algorithm without a cap then defines none of their dispatchers.

DEFAULT_ALGORITHM = "bfd"

# Room-indexed structures (bfd and the histogram packers) take O(capacity) memory, so a
# mistyped capacity must fail with a message, not with a MemoryError.
MAX_CAPACITY = 1 << 24
# Rows are int32 in the outputs and in the runs; a call with more sequences must be split.
MAX_SEQUENCES = (1 << 31) - 1

# Graphcore's packers cap sequences per row (3 for BERT) because their attention masks had
# a static number of slots; causal-LM rows with mean length ~300 in 2048 tokens need ~7
# per row, so the cap is off (0) here. The histogram kernel still takes one (tested).
HISTOGRAM_MAX_SEQUENCES_PER_ROW = 0

# The packers whose rows plan_lengths repairs with improve_rows: the decreasing ones,
# which leave a little room in many rows. nf and ff are chosen for keeping input order
# (exactly, or row by row); moving sequences between their rows would undo that.
IMPROVED_ALGORITHMS = ("ffd", "bfd", "spfhp", "lpfhp")
# improve_rows' default work budget: this much per sequence plus a constant. Without the
# constant, the text benchmark corpus (144k segments at 2048) needs 32 per sequence to
# reach its bound (docs/benchmarks/repair-2026-11-23.md).
IMPROVE_WORK_PER_SEQUENCE = 64
IMPROVE_WORK_BASE = 1 << 20


@dataclass(frozen=True)
class PackedLengths:
    """Where each sequence went: its row and its first token in that row."""

    row: np.ndarray
    offset: np.ndarray
    n_rows: int


# --------------------------------------------------------------------------------------
# Public wrapper
# --------------------------------------------------------------------------------------


def _as_capacity(capacity) -> int:
    if isinstance(capacity, (bool, np.bool_)) or not isinstance(capacity, (int, np.integer)):
        raise PackcliError(f"capacity must be an integer, got {capacity!r}")
    capacity = int(capacity)
    if capacity < 1:
        raise PackcliError(f"capacity must be at least 1, got {capacity}")
    if capacity > MAX_CAPACITY:
        raise PackcliError(f"capacity {capacity} is too large: at most {MAX_CAPACITY} tokens per row")
    return capacity


def checked_lengths(lengths, capacity: int) -> np.ndarray:
    """Lengths as a contiguous int64 array, each between 1 and capacity: the validation every
    packing wrapper does before a kernel sees the lengths (kernels never validate)."""
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise PackcliError(f"lengths must be a 1-D sequence of integers, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.size > MAX_SEQUENCES:
        raise PackcliError(f"{array.size} sequences in one packing call; at most {MAX_SEQUENCES}")
    if array.dtype.kind not in "iu":
        raise PackcliError(f"lengths must be integers, got dtype {array.dtype}")
    given, array = array, np.ascontiguousarray(array, dtype=np.int64)
    smallest, largest = kernel(_min_max, array.size)(array)  # one pass; locate the culprit only on error
    if smallest < 1 or largest > capacity or (given.dtype == np.uint64 and given.max() > MAX_CAPACITY):  # wrapped
        i = int(np.flatnonzero((given < 1) | (given > capacity))[0])
        value = int(given[i])
        if value < 1:
            raise PackcliError(f"sequence {i} has length {value}; lengths must be at least 1")
        raise PackcliError(f"sequence {i} has length {value}, more than the capacity {capacity}")
    return array


@njit(cache=True)
def _min_max(values):
    smallest = largest = values[0]
    for i in range(values.shape[0]):  # branch-free, so that it vectorises
        smallest = min(smallest, values[i])
        largest = max(largest, values[i])
    return smallest, largest


def pack_lengths(
    lengths, capacity: int, algorithm: str = DEFAULT_ALGORITHM, seed: int = 0, max_sequences_per_row: int | None = None
) -> PackedLengths:
    """Place every sequence into a row of ``capacity`` tokens, at most
    ``max_sequences_per_row`` in a row when it is given.

    ``seed`` is part of the API so that a randomised packer can be added without changing
    callers; none of the current algorithms uses it.
    """
    lengths, capacity, cap = _checked(lengths, capacity, algorithm, max_sequences_per_row)
    return _pack(lengths, capacity, algorithm, cap)


def _checked(lengths, capacity, algorithm: str, max_sequences_per_row) -> tuple[np.ndarray, int, int]:
    if algorithm not in ALGORITHMS:
        raise PackcliError(f"unknown packing algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    capacity = _as_capacity(capacity)
    return checked_lengths(lengths, capacity), capacity, _as_cap(max_sequences_per_row)


def _pack(lengths: np.ndarray, capacity: int, algorithm: str, cap: int) -> PackedLengths:
    """pack_lengths on checked input (cap 0: none)."""
    # int32 is enough (rows < MAX_SEQUENCES, offsets < MAX_CAPACITY) and halves what the
    # kernels write. Fresh output pages are faulted in on first write: ~3.4 us per 4 KB
    # page on the development machine, 6.6 ms for two 1M-element outputs, as much as a whole packer. One
    # buffer for both is big enough (>= 4 MiB from 512Ki sequences) for numpy to ask for
    # transparent huge pages, 512 times fewer faults.
    row, offset = np.empty((2, lengths.shape[0]), dtype=np.int32)
    work = lengths.shape[0] + capacity
    if cap:
        n_rows = _capped(algorithm, lengths, capacity, cap, row, offset)
    elif algorithm == "nf":
        n_rows = kernel(_nf_kernel, work)(lengths, capacity, row, offset)
    elif algorithm == "ff":
        n_rows = kernel(_ff_kernel, work)(lengths, capacity, row, offset)
    elif algorithm == "ffd":
        n_rows = kernel(_ffd_kernel, work)(lengths, capacity, row, offset)
    elif algorithm == "bfd":
        n_rows = kernel(_bfd_kernel, work)(lengths, capacity, row, offset)
    else:
        from packcli.plan.kernels.histogram import _histogram_kernel

        longest_first = algorithm == "lpfhp"
        n_rows = _histogram_kernel(lengths, capacity, longest_first, HISTOGRAM_MAX_SEQUENCES_PER_ROW, row, offset)
    return PackedLengths(row=row, offset=offset, n_rows=int(n_rows))


def _as_cap(cap) -> int:
    """0 for no cap; else a positive integer."""
    if cap is None:
        return 0
    if isinstance(cap, (bool, np.bool_)) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise PackcliError(f"max_sequences_per_row must be a positive integer, got {cap!r}")
    return min(int(cap), MAX_SEQUENCES)


def _capped(algorithm: str, lengths: np.ndarray, capacity: int, cap: int, row: np.ndarray, offset: np.ndarray) -> int:
    from packcli.plan.kernels.cap import _bfd_capped_kernel, _ff_capped_kernel, _ffd_capped_kernel, _nf_capped_kernel
    from packcli.plan.kernels.histogram import _histogram_kernel

    if algorithm == "nf":
        return int(_nf_capped_kernel(lengths, capacity, cap, row, offset))
    if algorithm == "ff":
        return int(_ff_capped_kernel(lengths, capacity, cap, row, offset))
    if algorithm == "ffd":
        return int(_ffd_capped_kernel(lengths, capacity, cap, row, offset))
    if algorithm == "bfd":
        return int(_bfd_capped_kernel(lengths, capacity, cap, row, offset))
    return int(_histogram_kernel(lengths, capacity, algorithm == "lpfhp", cap, row, offset))


def improve_rows(lengths, placed: PackedLengths, capacity: int, budget: int | None = None) -> PackedLengths:
    """A placement with fewer rows where the room the packer left adds up to whole rows
    (packcli/plan/kernels/improve.py has the rules); the same placement when it cannot.
    Every sequence stays exactly once and no row exceeds `capacity`."""
    capacity = _as_capacity(capacity)
    lengths = checked_lengths(lengths, capacity)
    n = lengths.shape[0]
    row, offset = np.asarray(placed.row), np.asarray(placed.offset)
    if row.shape != (n,) or offset.shape != (n,) or row.dtype.kind not in "iu" or offset.dtype.kind not in "iu":
        raise PackcliError(
            f"row and offset must be {n} integers each, got {row.dtype} {row.shape}, {offset.dtype} {offset.shape}"
        )
    n_rows = int(placed.n_rows)
    if n == 0:
        return PackedLengths(row=np.zeros(0, dtype=np.int32), offset=np.zeros(0, dtype=np.int32), n_rows=0)
    if row.min() < 0 or row.max() >= n_rows:
        raise PackcliError(f"rows must be in 0..{n_rows - 1}, got {int(row.min())}..{int(row.max())}")
    fills = np.bincount(row, weights=lengths, minlength=n_rows)
    if fills.max() > capacity or np.count_nonzero(fills) != n_rows:
        raise PackcliError(f"every row must hold 1 to {capacity} tokens, as pack_lengths places them")
    new_row, new_offset = np.empty((2, n), dtype=np.int32)
    new_row[:] = row
    new_offset[:] = offset
    return _repair(lengths, capacity, PackedLengths(new_row, new_offset, n_rows), budget)


def _repair(lengths: np.ndarray, capacity: int, placed: PackedLengths, budget: int | None) -> PackedLengths:
    """improve_rows on checked input; rewrites placed.row and placed.offset in place."""
    if budget is None:
        budget = IMPROVE_WORK_PER_SEQUENCE * len(lengths) + IMPROVE_WORK_BASE
    repair = kernel(_improve_kernel, len(lengths) + capacity)
    n_rows = repair(lengths, capacity, placed.row, placed.offset, placed.n_rows, int(budget))
    return PackedLengths(row=placed.row, offset=placed.offset, n_rows=int(n_rows))


def plan_lengths(
    lengths, capacity: int, algorithm: str = DEFAULT_ALGORITHM, seed: int = 0, max_sequences_per_row=None
) -> PackedLengths:
    """The placement `packcli pack` uses: pack_lengths, repaired by improve_rows for the
    IMPROVED_ALGORITHMS. With a cap the repair does not run: its moves do not count
    sequences per row."""
    lengths, capacity, cap = _checked(lengths, capacity, algorithm, max_sequences_per_row)
    placed = _pack(lengths, capacity, algorithm, cap)  # fresh arrays: the repair may rewrite them
    if not cap and algorithm in IMPROVED_ALGORITHMS and placed.n_rows > 1:
        placed = _repair(lengths, capacity, placed, None)
    return placed


def bfd_rows_from_counts(counts, capacity: int) -> int:
    """Rows bfd needs for counts[L] sequences of each length L (index 0 unused), without
    the sequences: its row count depends on the counts alone. This is what lets a stream
    packed in windows report, in bounded memory, what one window would have needed."""
    capacity = _as_capacity(capacity)
    counts = np.asarray(counts)
    if counts.shape != (capacity + 1,) or counts.dtype.kind not in "iu":
        raise PackcliError(
            f"counts must be {capacity + 1} integers (lengths 0..{capacity}), got {counts.dtype} {counts.shape}"
        )
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if counts.min() < 0 or counts[0] != 0:
        raise PackcliError("counts must be non-negative, with no sequence of length 0")
    n = int(counts.sum())
    if n == 0:
        return 0
    _, _, _, n_rows = kernel(_bfd_plan, n + capacity)(counts, capacity, n)
    return int(n_rows)


def lower_bound_rows(lengths, capacity: int) -> int:
    """ceil(total tokens / capacity): no packing can use fewer rows."""
    capacity = _as_capacity(capacity)
    total = int(np.asarray(lengths, dtype=np.int64).sum())
    return -(-total // capacity)


def martello_toth_l2(lengths, capacity: int) -> int:
    """Martello and Toth's L2 bound (1990): also counts sequences longer than half a row,
    which can never share a row with each other. It is never below lower_bound_rows and
    is the honest bound when many sequences exceed capacity/2.

    For every threshold K in 0..capacity/2: sequences longer than capacity-K each need a
    row of their own (J1); those in (capacity/2, capacity-K] too (J2), and the sequences
    in [K, capacity/2] (J3) can only use the room J2 leaves, plus new rows."""
    capacity = _as_capacity(capacity)
    lengths = checked_lengths(lengths, capacity)
    if lengths.size == 0:
        return 0
    counts = np.bincount(lengths, minlength=capacity + 1).astype(np.int64)
    tokens = counts * np.arange(capacity + 1, dtype=np.int64)
    # Suffix sums: number and tokens of sequences with length >= v.
    count_ge = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])
    tokens_ge = np.concatenate([np.cumsum(tokens[::-1])[::-1], [0]])
    half = capacity // 2  # lengths > capacity/2 are exactly lengths >= half + 1
    k = np.arange(0, half + 1, dtype=np.int64)
    n_over_half = count_ge[half + 1]  # |J1| + |J2|
    # J2 = lengths in [half+1, capacity-k]; J1 = lengths > capacity-k.
    j2_count = n_over_half - count_ge[capacity - k + 1]
    j2_tokens = tokens_ge[half + 1] - tokens_ge[capacity - k + 1]
    j3_tokens = tokens_ge[np.maximum(k, 1)] - tokens_ge[half + 1]
    spill = j3_tokens - (j2_count * capacity - j2_tokens)
    extra = np.maximum(0, -(-spill // capacity))
    return int((n_over_half + extra).max())
