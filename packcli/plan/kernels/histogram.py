"""Histogram packers (Graphcore's SPFHP and LPFHP): rows decided from the length histogram
alone, in whole groups of identical rows, then one pass to place the sequences.

``_histogram_kernel`` fills ``row`` and ``offset`` and trusts its input
(``packcli.plan.kernels.pack.pack_lengths`` validates)."""

from __future__ import annotations

import numpy as np

from packcli.core.jit import njit
from packcli.plan.kernels.bitset import _bitset_add, _bitset_new, _bitset_next, _bitset_prev, _bitset_remove
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


# One function on purpose: split into helpers for the room search, new rows, extending a
# group and pushing it (inlined), it ran 3-4x slower on 1M lognormal lengths (0.26-0.39
# -> 1.1 ms at capacity 2048, 0.6-1.1 -> 2.5-2.8 ms at 8192); the push alone as a helper
# (inlined or not) still 1.4-2.1x slower.
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
                elif remaining < groups[old, _G_COUNT]:
                    per_row = 1
                else:
                    # One copy per row, one step at a time, would pick these rows again as
                    # long as they stay the emptiest (equal room: they are the latest on
                    # the stack) and L fits: take all those steps at once.
                    floor_room = max(_bitset_prev(words, level_starts, room), length)
                    per_row = min(1 + (room - floor_room) // length, remaining // groups[old, _G_COUNT])
                if max_per_row > 0:  # a group on a stack holds fewer than max_per_row: one more fits
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
