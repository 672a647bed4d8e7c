"""Bin-packing kernels: assign sequence lengths to fixed-capacity rows.

Public API (the only names other modules use):

    ALGORITHMS: tuple[str, ...]            # ("nf", "ff", "ffd", "bfd", "spfhp", "lpfhp")
    DEFAULT_ALGORITHM = "bfd"

    @dataclass(frozen=True)
    class Placement:
        row: np.ndarray     # int32 [n]: row of each sequence; rows are numbered 0..n_rows-1
        offset: np.ndarray  # int32 [n]: first token of the sequence inside its row
        n_rows: int

    def pack_lengths(lengths, capacity, algorithm="bfd", seed=0) -> Placement
    def bfd_rows_from_counts(counts, capacity) -> int        # bfd's row count, from counts
    def lower_bound_rows(lengths, capacity) -> int           # ceil(sum / capacity)
    def martello_toth_l2(lengths, capacity) -> int           # a tighter lower bound

Contract of pack_lengths: every length must be an integer in [1, capacity] (else
PackcliError); inside each row, sequences sit back to back from offset 0 with no gap, in
the order they were placed; same input, algorithm and seed give the same Placement.
Rows are numbered in the order they were opened. No algorithm here is randomised, so
``seed`` is accepted (the CLI passes it through) but currently changes nothing.

Each algorithm is a private ``@njit(cache=True)`` kernel over plain arrays (int64
lengths in, int32 row and offset out) that trusts its input; ``pack_lengths`` is the
only place that validates. The algorithms, their tie-breaking rules and their costs are
described in docs/kernels.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import config as numba_config
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from packcli.choices import ALGORITHMS
from packcli.errors import PackcliError

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


@dataclass(frozen=True)
class Placement:
    row: np.ndarray
    offset: np.ndarray
    n_rows: int


# --------------------------------------------------------------------------------------
# Hierarchical bitset over 0..n_bits-1 in 32-bit words (held in int64 so that the same
# code runs under NUMBA_DISABLE_JIT). Level 0 holds the bits; bit w of level l+1 says
# whether word w of level l is non-zero. Finding the next set bit touches one word per
# level, i.e. 3 words for a capacity of 8192.
# --------------------------------------------------------------------------------------

_WORD_SHIFT = 5
_WORD_MASK = 31
_FULL_WORD = 0xFFFFFFFF

if numba_config.DISABLE_JIT:  # the intrinsics below only exist in compiled code

    def _lowest_bit(word):
        return (int(word) & -int(word)).bit_length() - 1

    def _highest_bit(word):
        return int(word).bit_length() - 1

else:
    # One tzcnt/lzcnt instruction each; measured against a mod-37 table lookup, bfd was
    # 6-65% faster in interleaved rounds on 1M lognormal lengths.
    @njit(cache=True, inline="always")
    def _lowest_bit(word):
        return trailing_zeros(word)

    @njit(cache=True, inline="always")
    def _highest_bit(word):
        return 63 - leading_zeros(word)


@njit(cache=True)
def _bitset_new(n_bits):
    """Return (words, level_starts): level l occupies words[level_starts[l]:level_starts[l+1]]."""
    n_levels = 1
    size = (n_bits + _WORD_MASK) >> _WORD_SHIFT
    while size > 1:
        size = (size + _WORD_MASK) >> _WORD_SHIFT
        n_levels += 1
    level_starts = np.zeros(n_levels + 1, dtype=np.int64)
    size = (n_bits + _WORD_MASK) >> _WORD_SHIFT
    for level in range(n_levels):
        level_starts[level + 1] = level_starts[level] + size
        size = (size + _WORD_MASK) >> _WORD_SHIFT
    return np.zeros(level_starts[n_levels], dtype=np.int64), level_starts


@njit(cache=True, inline="always")
def _bitset_add(words, level_starts, bit):
    for level in range(level_starts.shape[0] - 1):
        index = level_starts[level] + (bit >> _WORD_SHIFT)
        old = words[index]
        words[index] = old | (1 << (bit & _WORD_MASK))
        if old != 0:
            return
        bit >>= _WORD_SHIFT


@njit(cache=True, inline="always")
def _bitset_remove(words, level_starts, bit):
    for level in range(level_starts.shape[0] - 1):
        index = level_starts[level] + (bit >> _WORD_SHIFT)
        new = words[index] & ~(1 << (bit & _WORD_MASK))
        words[index] = new
        if new != 0:
            return
        bit >>= _WORD_SHIFT


@njit(cache=True, inline="always")
def _bitset_next(words, level_starts, bit):
    """Smallest set bit >= bit, or -1."""
    n_levels = level_starts.shape[0] - 1
    level = 0
    while level < n_levels:
        word_index = bit >> _WORD_SHIFT
        if word_index >= level_starts[level + 1] - level_starts[level]:
            return -1
        word = words[level_starts[level] + word_index] & ((_FULL_WORD << (bit & _WORD_MASK)) & _FULL_WORD)
        if word != 0:
            bit = (word_index << _WORD_SHIFT) + _lowest_bit(word)
            while level > 0:
                level -= 1
                bit = (bit << _WORD_SHIFT) + _lowest_bit(words[level_starts[level] + bit])
            return bit
        bit = word_index + 1
        level += 1
    return -1


@njit(cache=True, inline="always")
def _bitset_prev(words, level_starts, bit):
    """Largest set bit <= bit, or -1."""
    n_levels = level_starts.shape[0] - 1
    level = 0
    while level < n_levels:
        if bit < 0:
            return -1
        word_index = bit >> _WORD_SHIFT
        n_words = level_starts[level + 1] - level_starts[level]
        if word_index >= n_words:
            word_index = n_words - 1
            bit = (word_index << _WORD_SHIFT) + _WORD_MASK
        word = words[level_starts[level] + word_index] & ((2 << (bit & _WORD_MASK)) - 1)
        if word != 0:
            bit = (word_index << _WORD_SHIFT) + _highest_bit(word)
            while level > 0:
                level -= 1
                bit = (bit << _WORD_SHIFT) + _highest_bit(words[level_starts[level] + bit])
            return bit
        bit = word_index - 1
        level += 1
    return -1


# --------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _length_counts(lengths, capacity):
    counts = np.zeros(capacity + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        counts[lengths[i]] += 1
    return counts


@njit(cache=True)
def _shortest_length(counts):
    shortest = 1
    while counts[shortest] == 0:
        shortest += 1
    return shortest


@njit(cache=True)
def _first_table_size(counts, capacity):
    """First size of a table that grows with the distinct lengths (bfd's runs, the
    histogram packers' groups): measured 3 to 9 entries per distinct length on lognormal
    lengths. Rows of an np.empty table that are never written cost nothing, so the guess
    is generous; a caller whose table fills retries with one 4x bigger (growing a table
    inside the loop makes numba take ~20 s to compile the function)."""
    n_lengths = 0
    for length in range(1, capacity + 1):
        n_lengths += counts[length] > 0
    return 16 * n_lengths + 1024


# --------------------------------------------------------------------------------------
# Decreasing order without an index array (ffd)
#
# ffd visits sequences longest first, ties by input index. Looking lengths and outputs up
# through an order array costs three cache misses per sequence on large inputs, so
# instead the main loop walks lengths from capacity down to 1 and records each placement
# as the next "slot" of its length (sequential writes); a final pass in input order hands
# the j-th sequence of length L the j-th slot of L. Same result, no scatter. bfd and the
# histogram packers follow the same rule with runs of slots (below): their decisions come
# in whole rows and stacks, ffd's one sequence at a time, where a run per decision would
# cost more than a slot.
# --------------------------------------------------------------------------------------

# A slot packs (row, offset) into one int64: offset < capacity <= 2**24.
_SLOT_SHIFT = 24
_SLOT_MASK = (1 << _SLOT_SHIFT) - 1


@njit(cache=True)
def _slot_starts(counts, capacity):
    """First slot of each length when slots are laid out longest first."""
    starts = np.empty(capacity + 1, dtype=np.int64)
    position = 0
    for length in range(capacity, 0, -1):
        starts[length] = position
        position += counts[length]
    starts[0] = position
    return starts


@njit(cache=True)
def _slots_to_placement(lengths, slots, starts, row, offset):
    cursor = starts.copy()
    for i in range(lengths.shape[0]):
        slot = slots[cursor[lengths[i]]]
        cursor[lengths[i]] += 1
        row[i] = slot >> _SLOT_SHIFT
        offset[i] = slot & _SLOT_MASK


# --------------------------------------------------------------------------------------
# Next fit
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _nf_kernel(lengths, capacity, row, offset):
    """One open row at a time, in input order: the only packer that keeps input order."""
    current_row = -1
    fill = capacity  # forces a new row for the first sequence
    for i in range(lengths.shape[0]):
        length = lengths[i]
        if fill + length > capacity:
            current_row += 1
            fill = 0
        row[i] = current_row
        offset[i] = fill
        fill += length
    return current_row + 1


# --------------------------------------------------------------------------------------
# First fit (input order) and first fit decreasing
#
# A 16-ary max-tree over the rows' remaining room: a node's 16 int32 children span 64
# bytes, about one cache line, so finding the leftmost row that fits reads ~log16(rows)
# lines (5 for 1M rows) instead of log2(rows) scattered nodes of a binary tree. Rows not yet
# opened have room == capacity, so the leftmost fit is either an open row or the next
# row to open, and opening needs no special case.
# --------------------------------------------------------------------------------------

_FANOUT = 16


@njit(cache=True)
def _room_tree_new(n_leaves, capacity):
    """Return (tree, level_starts); level 0 = leaves, the last level is one block."""
    n_levels = 1
    size = (n_leaves + _FANOUT - 1) // _FANOUT * _FANOUT
    while size > _FANOUT:
        size = (size // _FANOUT + _FANOUT - 1) // _FANOUT * _FANOUT
        n_levels += 1
    level_starts = np.zeros(n_levels + 1, dtype=np.int64)
    size = (n_leaves + _FANOUT - 1) // _FANOUT * _FANOUT
    for level in range(n_levels):
        level_starts[level + 1] = level_starts[level] + size
        size = (size // _FANOUT + _FANOUT - 1) // _FANOUT * _FANOUT
    return np.full(level_starts[n_levels], capacity, dtype=np.int32), level_starts


@njit(cache=True, inline="always")
def _room_tree_leftmost(tree, level_starts, length):
    node = 0
    for level in range(level_starts.shape[0] - 2, -1, -1):
        base = level_starts[level] + node * _FANOUT
        fits = 0  # bit c set if child c fits; branch-free so that it vectorises
        for child in range(_FANOUT):
            fits |= np.int64(tree[base + child] >= length) << child
        node = node * _FANOUT + _lowest_bit(fits)
    return node


@njit(cache=True, inline="always")
def _room_tree_take(tree, level_starts, leaf, length):
    tree[leaf] -= length
    node = leaf
    for level in range(level_starts.shape[0] - 2):
        parent = node // _FANOUT
        base = level_starts[level] + parent * _FANOUT
        best = tree[base]
        for child in range(1, _FANOUT):
            best = max(best, tree[base + child])
        slot = level_starts[level + 1] + parent
        if tree[slot] == best:
            return
        tree[slot] = best
        node = parent


@njit(cache=True)
def _max_first_fit_rows(lengths, capacity):
    """Any two rows of a first-fit packing hold more than capacity tokens together, so
    there are at most 2*ceil(total/capacity) rows: that bounds the tree, not n."""
    total = 0
    for i in range(lengths.shape[0]):
        total += lengths[i]
    return min(lengths.shape[0], 2 * ((total + capacity - 1) // capacity) + 1)


@njit(cache=True)
def _ff_kernel(lengths, capacity, row, offset):
    """Lowest-numbered row with room, sequences in input order."""
    n = lengths.shape[0]
    if n == 0:
        return 0
    tree, level_starts = _room_tree_new(_max_first_fit_rows(lengths, capacity), capacity)
    n_rows = 0
    for i in range(n):
        length = lengths[i]
        target = _room_tree_leftmost(tree, level_starts, length)
        if target == n_rows:
            n_rows += 1
        row[i] = target
        offset[i] = capacity - tree[target]
        _room_tree_take(tree, level_starts, target, length)
    return n_rows


@njit(cache=True)
def _ffd_kernel(lengths, capacity, row, offset):
    """First fit, longest sequence first (ties: lower input index first)."""
    n = lengths.shape[0]
    if n == 0:
        return 0
    tree, level_starts = _room_tree_new(_max_first_fit_rows(lengths, capacity), capacity)
    counts = _length_counts(lengths, capacity)
    starts = _slot_starts(counts, capacity)
    slots = np.empty(n, dtype=np.int64)
    n_rows = 0
    k = 0
    for length in range(capacity, 0, -1):
        for _ in range(counts[length]):
            target = _room_tree_leftmost(tree, level_starts, length)
            if target == n_rows:
                n_rows += 1
            slots[k] = (np.int64(target) << _SLOT_SHIFT) | (capacity - tree[target])
            k += 1
            _room_tree_take(tree, level_starts, target, length)
    _slots_to_placement(lengths, slots, starts, row, offset)
    return n_rows


# --------------------------------------------------------------------------------------
# Runs: how bfd and the histogram packers hand out positions
#
# A run is `rows` rows, first_row, first_row + step, ..., each taking `copies` sequences of
# one length side by side from `offset`: a grid of rows x copies slots. The runs of a
# length, in order, list its slots, and the j-th sequence of length L in input order takes
# the j-th slot of L, so one sequential pass places every sequence. Inside a run, bfd's
# order is row by row (it fills a row before it moves on); the histogram packers are free
# to choose, and walk the longer side of the grid first, which changes runs least often.
# --------------------------------------------------------------------------------------

_R_FIRST_ROW = 0
_R_STEP = 1
_R_ROWS = 2
_R_OFFSET = 3
_R_COPIES = 4
_R_COLUMNS = 5

# The placement pass keeps one 64-byte line of state per length. A position is one int64,
# row << 32 | offset, so that stepping along a row (offset + length) or down the rows
# (row + step) is the same addition of a delta.
_P_POSITION = 0
_P_DELTA = 1  # added after each sequence
_P_LEFT = 2  # sequences left before the walk turns to the next row or copy
_P_LINE = 3  # position where the current line of the grid started
_P_LINE_DELTA = 4  # from one line of the grid to the next
_P_LINE_LENGTH = 5
_P_LINES_LEFT = 6
_P_RUN = 7
_P_COLUMNS = 8


@njit(cache=True, inline="always")
def _start_run(state, length, runs, r, rows_first):
    rows = np.int64(runs[r, _R_ROWS])
    copies = np.int64(runs[r, _R_COPIES])
    row_delta = np.int64(runs[r, _R_STEP]) << 32
    position = (np.int64(runs[r, _R_FIRST_ROW]) << 32) | runs[r, _R_OFFSET]
    state[length, _P_POSITION] = position
    state[length, _P_LINE] = position
    if copies == 1 or (rows_first and rows >= copies):  # down the rows, then the next copy
        state[length, _P_DELTA] = row_delta
        state[length, _P_LINE_DELTA] = length
        state[length, _P_LINE_LENGTH] = rows
        state[length, _P_LINES_LEFT] = copies
    else:  # along a row, then the next row
        state[length, _P_DELTA] = length
        state[length, _P_LINE_DELTA] = row_delta
        state[length, _P_LINE_LENGTH] = copies
        state[length, _P_LINES_LEFT] = rows
    state[length, _P_LEFT] = state[length, _P_LINE_LENGTH]
    state[length, _P_RUN] = r


@njit(cache=True)
def _runs_to_placement(lengths, capacity, run_begin, run_end, runs, rows_first, row, offset):
    """One sequential pass. Moving to the next line of a run reads only the length's own
    state line; only a new run reads the runs table (once per run, not per sequence).
    rows_first: walk each run down its rows first when that side is the longer one."""
    # Only the lines of lengths that occur are written (and read): zeroing all of them
    # would touch 64 bytes per possible length, 512 KB at 8192, on every call.
    state = np.empty((capacity + 1, _P_COLUMNS), dtype=np.int64)
    for length in range(1, capacity + 1):
        if run_begin[length] < run_end[length]:
            _start_run(state, length, runs, run_begin[length], rows_first)
    for i in range(lengths.shape[0]):
        length = lengths[i]
        position = state[length, _P_POSITION]
        row[i] = position >> 32
        offset[i] = position & 0xFFFFFFFF
        state[length, _P_POSITION] = position + state[length, _P_DELTA]
        state[length, _P_LEFT] -= 1
        if state[length, _P_LEFT] == 0:
            state[length, _P_LINES_LEFT] -= 1
            if state[length, _P_LINES_LEFT] > 0:
                line = state[length, _P_LINE] + state[length, _P_LINE_DELTA]
                state[length, _P_LINE] = line
                state[length, _P_POSITION] = line
                state[length, _P_LEFT] = state[length, _P_LINE_LENGTH]
            elif state[length, _P_RUN] + 1 < run_end[length]:
                _start_run(state, length, runs, state[length, _P_RUN] + 1, rows_first)


# --------------------------------------------------------------------------------------
# Best fit decreasing
#
# Taken one sequence at a time, bfd costs a room search and a random row access per
# sequence. But all sequences of one length L arrive together, and then best fit acts on
# whole stacks: the smallest room r >= L gets L, then again (its new room r-L is now the
# smallest that fits) until fewer than L tokens are left, i.e. floor(r/L) copies; then the
# next row of the same stack, and so on up the rooms. So every row of a stack gets the same
# number of copies, and only stack order (LIFO) tells rows apart. The kernel therefore
# moves *segments* (runs of rows numbered by a constant step, bottom to top of a stack)
# instead of rows: popping m rows off a stack and pushing them onto another reverses their
# order, which flips the step. Each move is a run of the placement pass; its cost depends on
# the number of segments, not of sequences, and the result is the sequence-by-sequence
# bfd's exactly (tests compare it with tests/naive.py).
# --------------------------------------------------------------------------------------

_S_FIRST_ROW = 0  # bottom row of the segment in its stack
_S_STEP = 1
_S_ROWS = 2
_S_BELOW = 3  # next segment down in the same room's stack
_S_COLUMNS = 4


@njit(cache=True)
def _bfd_runs(counts, capacity, max_runs):
    """Returns (run_begin, run_end, runs, n_rows), or n_rows == -1 if more than max_runs
    runs are needed (the caller retries with a bigger table, as for the histogram
    packers; every run places at least one sequence, so n runs always suffice)."""
    shortest = _shortest_length(counts)
    runs = np.empty((max_runs, _R_COLUMNS), dtype=np.int32)
    run_begin = np.zeros(capacity + 1, dtype=np.int64)
    run_end = np.zeros(capacity + 1, dtype=np.int64)
    # At most one segment is created per run.
    segments = np.empty((max_runs, _S_COLUMNS), dtype=np.int32)  # rows < 2**31
    top = np.full(capacity + 1, -1, dtype=np.int64)
    words, level_starts = _bitset_new(capacity + 1)
    n_runs = 0
    n_segments = 0
    n_rows = 0
    for length in range(capacity, shortest - 1, -1):
        run_begin[length] = n_runs
        remaining = counts[length]
        while remaining > 0:
            if n_runs == max_runs:
                return run_begin, run_end, runs, -1
            room = _bitset_next(words, level_starts, length)
            if room < 0:  # new rows, each with as many copies as fit
                room = capacity
                copies = min(capacity // length, remaining)
                n_moved = remaining // copies
                first_row = n_rows
                step = 1
                n_rows += n_moved
            else:  # the top rows of the best stack
                copies = min(room // length, remaining)
                source = top[room]
                n_moved = min(segments[source, _S_ROWS], remaining // copies)
                source_step = segments[source, _S_STEP]
                first_row = segments[source, _S_FIRST_ROW] + source_step * (segments[source, _S_ROWS] - 1)
                step = -source_step
                segments[source, _S_ROWS] -= n_moved
                if segments[source, _S_ROWS] == 0:
                    top[room] = segments[source, _S_BELOW]
                    if top[room] < 0:
                        _bitset_remove(words, level_starts, room)
            remaining -= n_moved * copies
            runs[n_runs, _R_FIRST_ROW] = first_row
            runs[n_runs, _R_STEP] = step
            runs[n_runs, _R_ROWS] = n_moved
            runs[n_runs, _R_OFFSET] = capacity - room
            runs[n_runs, _R_COPIES] = copies
            n_runs += 1
            room -= copies * length
            # A row with less room than the shortest sequence can never be chosen again.
            if room < shortest:
                continue
            below = top[room]
            if below >= 0:  # extend the segment on top when the rows continue it
                below_rows = segments[below, _S_ROWS]
                gap = first_row - (segments[below, _S_FIRST_ROW] + segments[below, _S_STEP] * (below_rows - 1))
                if (
                    (gap == 1 or gap == -1)
                    and (below_rows == 1 or gap == segments[below, _S_STEP])
                    and (n_moved == 1 or gap == step)
                ):
                    segments[below, _S_STEP] = gap
                    segments[below, _S_ROWS] = below_rows + n_moved
                    continue
            else:
                _bitset_add(words, level_starts, room)
            segments[n_segments, _S_FIRST_ROW] = first_row
            segments[n_segments, _S_STEP] = step
            segments[n_segments, _S_ROWS] = n_moved
            segments[n_segments, _S_BELOW] = below
            top[room] = n_segments
            n_segments += 1
        run_end[length] = n_runs
    return run_begin, run_end, runs, n_rows


@njit(cache=True)
def _bfd_plan(counts, capacity, n):
    """Runs and row count for n sequences with these length counts."""
    max_runs = min(n, _first_table_size(counts, capacity))
    while True:
        run_begin, run_end, runs, n_rows = _bfd_runs(counts, capacity, max_runs)
        if n_rows >= 0:
            return run_begin, run_end, runs, n_rows
        max_runs = min(n, 4 * max_runs)


@njit(cache=True)
def _bfd_kernel(lengths, capacity, row, offset):
    """Best fit decreasing; ties (equal room) go to the row that reached that room most
    recently (LIFO). Histogram, then stacks of row segments, then one pass to place."""
    n = lengths.shape[0]
    if n == 0:
        return 0
    counts = _length_counts(lengths, capacity)
    run_begin, run_end, runs, n_rows = _bfd_plan(counts, capacity, n)
    _runs_to_placement(lengths, capacity, run_begin, run_end, runs, False, row, offset)
    return n_rows


# --------------------------------------------------------------------------------------
# Histogram packers (SPFHP, LPFHP)
# --------------------------------------------------------------------------------------

# Columns of the group table. A group is a run of identical rows, first_row ..
# first_row+count-1, so rows stay numbered in opening order: a group only ever splits into
# two contiguous runs. Its pack is a persistent linked list through the table: the parent
# group's pack followed by `repeat` copies of `length`. Splits share the parent's list, so
# a group is never deleted, only marked dead when all its rows moved on.
_G_FIRST_ROW = 0
_G_COUNT = 1
_G_SIZE = 2  # sequences per row
_G_ROOM = 3
_G_BELOW = 4  # next group down in the same room's stack
_G_ALIVE = 5
_G_PARENT = 6
_G_LENGTH = 7
_G_REPEAT = 8
_G_COLUMNS = 9


@njit(cache=True)
def _histogram_strategies(counts, capacity, longest_first, max_per_row, max_groups):
    """Decide the rows from the length histogram alone; the cost grows with the number of
    groups (a few per distinct length), not with the number of sequences.

    Lengths are taken longest first. Each step puts length L into a whole group of rows:
    longest_first (LPFHP) picks the fullest group that fits (smallest room >= L) and puts
    as many copies of L into each row as fit; otherwise (SPFHP) it picks the emptiest group
    (largest room) and puts one copy per row, spreading short sequences evenly (the
    steps that would pick the same rows again are taken in one). If the group has more
    rows than there are sequences left, it splits. If no group fits, new
    rows are opened with as many copies of L each as fit. Equal room: LIFO stack.

    Returns n_groups == -1 if more than max_groups groups are needed (see
    _first_table_size)."""
    shortest = _shortest_length(counts)
    groups = np.empty((max_groups, _G_COLUMNS), dtype=np.int32)  # all values < 2**31
    n_groups = 0
    n_rows = 0
    top = np.full(capacity + 1, -1, dtype=np.int64)
    words, level_starts = _bitset_new(capacity + 1)
    for length in range(capacity, shortest - 1, -1):
        remaining = counts[length]
        while remaining > 0:
            if longest_first:
                room = _bitset_next(words, level_starts, length)
            else:
                room = _bitset_prev(words, level_starts, capacity)
                if room < length:
                    room = -1
            if n_groups == max_groups:
                return groups, -1, 0
            new = n_groups
            n_groups += 1
            if room < 0:
                per_row = min(capacity // length, remaining)
                if max_per_row > 0:
                    per_row = min(per_row, max_per_row)
                n_new_rows = remaining // per_row
                groups[new, _G_FIRST_ROW] = n_rows
                groups[new, _G_COUNT] = n_new_rows
                groups[new, _G_SIZE] = per_row
                groups[new, _G_ROOM] = capacity - per_row * length
                groups[new, _G_PARENT] = -1
                groups[new, _G_REPEAT] = per_row
                n_rows += n_new_rows
                remaining -= n_new_rows * per_row
            else:
                old = top[room]
                top[room] = groups[old, _G_BELOW]
                if top[room] < 0:
                    _bitset_remove(words, level_starts, room)
                if longest_first:
                    per_row = min(room // length, remaining)
                    if max_per_row > 0:
                        per_row = min(per_row, max_per_row - groups[old, _G_SIZE])
                elif remaining < groups[old, _G_COUNT]:
                    per_row = 1
                else:
                    # One copy per row, one step at a time, would pick these rows again as
                    # long as they stay the emptiest (equal room: they are the latest on
                    # the stack) and L fits: take all those steps at once.
                    floor_room = max(_bitset_prev(words, level_starts, room), length)
                    per_row = min(1 + (room - floor_room) // length, remaining // groups[old, _G_COUNT])
                    if max_per_row > 0:
                        per_row = min(per_row, max_per_row - groups[old, _G_SIZE])
                n_extended = min(groups[old, _G_COUNT], remaining // per_row)
                groups[new, _G_FIRST_ROW] = groups[old, _G_FIRST_ROW]
                groups[new, _G_COUNT] = n_extended
                groups[new, _G_SIZE] = groups[old, _G_SIZE] + per_row
                groups[new, _G_ROOM] = room - per_row * length
                if groups[old, _G_LENGTH] == length:  # keep packs short: one entry per run of L
                    groups[new, _G_PARENT] = groups[old, _G_PARENT]
                    groups[new, _G_REPEAT] = groups[old, _G_REPEAT] + per_row
                else:
                    groups[new, _G_PARENT] = old
                    groups[new, _G_REPEAT] = per_row
                remaining -= n_extended * per_row
                groups[old, _G_FIRST_ROW] += n_extended
                groups[old, _G_COUNT] -= n_extended
                if groups[old, _G_COUNT] == 0:
                    groups[old, _G_ALIVE] = 0
                else:  # the rows left behind go back where they were
                    groups[old, _G_BELOW] = top[room]
                    if top[room] < 0:
                        _bitset_add(words, level_starts, room)
                    top[room] = old
            groups[new, _G_LENGTH] = length
            groups[new, _G_ALIVE] = 1
            new_room = np.int64(groups[new, _G_ROOM])  # int32 in the table; the bitset shifts it
            if new_room >= shortest and (max_per_row == 0 or groups[new, _G_SIZE] < max_per_row):
                groups[new, _G_BELOW] = top[new_room]
                if top[new_room] < 0:
                    _bitset_add(words, level_starts, new_room)
                top[new_room] = new
    return groups, n_groups, n_rows


@njit(cache=True)
def _radix_order(keys):
    """Indices that sort non-negative keys: LSD radix sort, 11 bits a pass (two passes
    below 4M); numba's argsort took 5x as long on the ~6,000 live groups of 1M lengths."""
    n = keys.shape[0]
    order = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    largest = 0
    for i in range(n):
        largest = max(largest, keys[i])
    shift = 0
    while shift == 0 or largest >> shift > 0:
        starts = np.zeros(2049, dtype=np.int64)
        for i in range(n):
            starts[((keys[order[i]] >> shift) & 2047) + 1] += 1
        for digit in range(2048):
            starts[digit + 1] += starts[digit]
        for i in range(n):
            digit = (keys[order[i]] >> shift) & 2047
            spare[starts[digit]] = order[i]
            starts[digit] += 1
        order, spare = spare, order
        shift += 11
    return order


@njit(cache=True)
def _histogram_runs(groups, n_groups, capacity):
    """List the runs of each length (see _runs_to_placement).

    Every (group, length in its pack) is a run: the group's rows, each with `repeat`
    copies of that length side by side. Groups are visited in row order, so the earliest
    sequences of each length land in the lowest rows."""
    n_live = 0
    for g in range(n_groups):
        n_live += groups[g, _G_ALIVE]
    live = np.empty(n_live, dtype=np.int64)
    first_rows = np.empty(n_live, dtype=np.int64)
    runs_per_length = np.zeros(capacity + 1, dtype=np.int64)
    k = 0
    for g in range(n_groups):
        if groups[g, _G_ALIVE] == 0:
            continue
        live[k] = g
        first_rows[k] = groups[g, _G_FIRST_ROW]
        k += 1
        node = g
        while node >= 0:
            runs_per_length[groups[node, _G_LENGTH]] += 1
            node = groups[node, _G_PARENT]
    run_begin = np.zeros(capacity + 1, dtype=np.int64)
    for length in range(1, capacity + 1):
        run_begin[length] = run_begin[length - 1] + runs_per_length[length - 1]
    run_end = run_begin.copy()  # grows to the end of each length's runs
    runs = np.empty((run_begin[capacity] + runs_per_length[capacity], _R_COLUMNS), dtype=np.int32)
    # Live groups cover disjoint rows; sorting the few thousand of them by first row is
    # cheaper than an index over all rows (a fresh array of n_rows, faulted in page by page).
    for k in _radix_order(first_rows):
        g = live[k]
        first_row = first_rows[k]
        # Offsets are laid out from the pack's front, so walk from its tail backwards.
        end = capacity - groups[g, _G_ROOM]
        node = g
        while node >= 0:
            length = groups[node, _G_LENGTH]
            repeat = groups[node, _G_REPEAT]
            end -= repeat * length
            r = run_end[length]
            runs[r, _R_FIRST_ROW] = first_row
            runs[r, _R_STEP] = 1
            runs[r, _R_ROWS] = groups[g, _G_COUNT]
            runs[r, _R_OFFSET] = end
            runs[r, _R_COPIES] = repeat
            run_end[length] = r + 1
            node = groups[node, _G_PARENT]
    return run_begin, run_end, runs


@njit(cache=True)
def _histogram_kernel(lengths, capacity, longest_first, max_per_row, row, offset):
    """Histogram, then strategies (cost independent of n), then one pass to place."""
    if lengths.shape[0] == 0:
        return 0
    counts = _length_counts(lengths, capacity)
    max_groups = _first_table_size(counts, capacity)
    while True:
        groups, n_groups, n_rows = _histogram_strategies(counts, capacity, longest_first, max_per_row, max_groups)
        if n_groups >= 0:
            break
        max_groups *= 4
    run_begin, run_end, runs = _histogram_runs(groups, n_groups, capacity)
    _runs_to_placement(lengths, capacity, run_begin, run_end, runs, True, row, offset)
    return n_rows


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


def _as_lengths(lengths, capacity: int) -> np.ndarray:
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
    smallest, largest = _min_max(array)  # one pass; locate the culprit only on error
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


def pack_lengths(lengths, capacity: int, algorithm: str = DEFAULT_ALGORITHM, seed: int = 0) -> Placement:
    """Place every sequence into a row of ``capacity`` tokens.

    ``seed`` is part of the API so that a randomised packer can be added without changing
    callers; none of the current algorithms uses it.
    """
    if algorithm not in ALGORITHMS:
        raise PackcliError(f"unknown packing algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    capacity = _as_capacity(capacity)
    lengths = _as_lengths(lengths, capacity)
    # int32 is enough (rows < MAX_SEQUENCES, offsets < MAX_CAPACITY) and halves what the
    # kernels write. Fresh output pages are faulted in on first write: ~3.4 us per 4 KB
    # page on the development machine, 6.6 ms for two 1M-element outputs, as much as a whole packer. One
    # buffer for both is big enough (>= 4 MiB from 512Ki sequences) for numpy to ask for
    # transparent huge pages, 512 times fewer faults.
    row, offset = np.empty((2, lengths.shape[0]), dtype=np.int32)
    if algorithm == "nf":
        n_rows = _nf_kernel(lengths, capacity, row, offset)
    elif algorithm == "ff":
        n_rows = _ff_kernel(lengths, capacity, row, offset)
    elif algorithm == "ffd":
        n_rows = _ffd_kernel(lengths, capacity, row, offset)
    elif algorithm == "bfd":
        n_rows = _bfd_kernel(lengths, capacity, row, offset)
    else:
        longest_first = algorithm == "lpfhp"
        n_rows = _histogram_kernel(lengths, capacity, longest_first, HISTOGRAM_MAX_SEQUENCES_PER_ROW, row, offset)
    return Placement(row=row, offset=offset, n_rows=int(n_rows))


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
    return int(_bfd_plan(counts, capacity, n)[3])


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
    lengths = _as_lengths(lengths, capacity)
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
