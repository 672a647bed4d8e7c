"""Packers with a cap on sequences per row (`--max-sequences-per-row`).

Each ``_*_capped_kernel(lengths, capacity, cap, row, offset) -> n_rows`` follows the
tie-breaking rules of its uncapped twin (tests/naive.py) with one more: a row holding
``cap`` sequences is closed and receives nothing more. They are separate kernels so
that uncapped runs keep their specialised, faster ones; ``packcli.plan.kernels.pack.pack_lengths``
validates and dispatches (the histogram packers take the cap natively).
"""

from __future__ import annotations

import numpy as np

from packcli.core.jit import njit
from packcli.plan.kernels.bitset import _bitset_add, _bitset_new, _bitset_next, _bitset_remove
from packcli.plan.kernels.fit import _room_tree_leftmost, _room_tree_new, _room_tree_take


@njit(cache=True)
def _nf_capped_kernel(lengths, capacity, cap, row, offset):
    """Next fit: a new row also when the current one holds `cap` sequences."""
    current_row = -1
    fill = capacity
    count = cap
    for i in range(lengths.shape[0]):
        length = lengths[i]
        if fill + length > capacity or count >= cap:
            current_row += 1
            fill = 0
            count = 0
        row[i] = current_row
        offset[i] = fill
        fill += length
        count += 1
    return current_row + 1


@njit(cache=True)
def _max_capped_rows(lengths, capacity, cap):
    """Rows still open hold more than capacity tokens two by two (first fit), and closed
    rows hold `cap` sequences each: that bounds the rows, hence the room tree."""
    n = lengths.shape[0]
    total = 0
    for i in range(n):
        total += lengths[i]
    return min(n, n // cap + 2 * ((total + capacity - 1) // capacity) + 1)


@njit(cache=True)
def _first_fit_capped(lengths, order, capacity, cap, row, offset):
    """First fit in the given order; a full row's room is taken away so no search finds it."""
    n = lengths.shape[0]
    if n == 0:
        return 0
    tree, level_starts = _room_tree_new(_max_capped_rows(lengths, capacity, cap), capacity)
    counts = np.zeros(tree.shape[0], dtype=np.int32)
    n_rows = 0
    for k in range(n):
        i = order[k]
        length = lengths[i]
        target = _room_tree_leftmost(tree, level_starts, length)
        if target == n_rows:
            n_rows += 1
        row[i] = target
        offset[i] = capacity - tree[target]
        _room_tree_take(tree, level_starts, target, length)
        counts[target] += 1
        if counts[target] >= cap and tree[target] > 0:
            _room_tree_take(tree, level_starts, target, tree[target])
    return n_rows


@njit(cache=True)
def _ff_capped_kernel(lengths, capacity, cap, row, offset):
    return _first_fit_capped(lengths, np.arange(lengths.shape[0]), capacity, cap, row, offset)


@njit(cache=True)
def _ffd_capped_kernel(lengths, capacity, cap, row, offset):
    order = np.argsort(-lengths, kind="mergesort")  # longest first, ties by input index
    return _first_fit_capped(lengths, order, capacity, cap, row, offset)


@njit(cache=True)
def _bfd_capped_kernel(lengths, capacity, cap, row, offset):
    """Best fit decreasing: the open row with the least room that fits, the most recently
    used among equal rooms (one LIFO stack of rows per room), rows with `cap` sequences
    or no room left out of every stack."""
    n = lengths.shape[0]
    if n == 0:
        return 0
    order = np.argsort(-lengths, kind="mergesort")
    words, level_starts = _bitset_new(capacity + 1)
    top = np.full(capacity + 1, -1, dtype=np.int64)  # per room, the stack's top row
    below = np.empty(n, dtype=np.int64)  # per row, the next row down its stack
    fill = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    n_rows = 0
    for k in range(n):
        i = order[k]
        length = lengths[i]
        room = _bitset_next(words, level_starts, length)
        if room < 0:
            target = n_rows
            n_rows += 1
        else:
            target = top[room]
            top[room] = below[target]
            if top[room] < 0:
                _bitset_remove(words, level_starts, room)
        row[i] = target
        offset[i] = fill[target]
        fill[target] += length
        count[target] += 1
        left = capacity - fill[target]
        if count[target] < cap and left > 0:
            below[target] = top[left]
            if top[left] < 0:
                _bitset_add(words, level_starts, left)
            top[left] = target
    return n_rows
