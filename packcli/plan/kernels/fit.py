"""Fit packers: next fit, first fit, first fit decreasing and best fit decreasing.

Each ``_*_kernel(lengths, capacity, row, offset) -> n_rows`` fills ``row`` and ``offset``
and trusts its input (``packcli.plan.kernels.pack.pack_lengths`` validates)."""

from __future__ import annotations

import numpy as np

from packcli.core.jit import njit
from packcli.plan.kernels.bitset import _bitset_add, _bitset_new, _bitset_next, _bitset_remove, _lowest_bit
from packcli.plan.kernels.runs import (
    _R_COLUMNS,
    _R_COPIES,
    _R_FIRST_ROW,
    _R_OFFSET,
    _R_ROWS,
    _R_STEP,
    _first_table_size,
    _length_counts,
    _runs_to_placement,
    _shortest_length,
)

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
        fits = np.int64(0)  # bit c set if child c fits; branch-free so that it vectorises
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


# One function on purpose (74 lines): with the take-rows and push-rows steps as helpers
# (inlined or not) it ran 2-6x slower on 1M lognormal lengths (0.16 -> 1.0 ms at capacity
# 2048, 0.40 -> 2.1 ms at 8192), 10-25% of a whole bfd call.
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
