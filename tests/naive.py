"""Slow, obviously correct reference packers that the kernels must match exactly.

Each returns (row, offset, n_rows) as Python lists/int. Rows are numbered in the order
they are opened; a sequence goes at the current end of its row. Tie-breaking rules are
the specification the kernels in packcli/kernels.py implement with fast structures:

- nf:  input order; a new row is opened when the sequence does not fit the current one.
- ff:  input order; the lowest-numbered row with room >= length, else a new row.
- ffd: like ff, but sequences are taken longest first, equal lengths by increasing index.
- bfd: order as ffd; the row with the least room >= length; among rows with equal room,
       the one that received a sequence most recently (LIFO); else a new row.
"""

from __future__ import annotations


def decreasing_order(lengths):
    """Longest first; equal lengths keep input order (a stable sort)."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def next_fit(lengths, capacity):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    n_rows, fill = 0, capacity
    for i, length in enumerate(lengths):
        if fill + length > capacity:
            n_rows += 1
            fill = 0
        row[i], offset[i] = n_rows - 1, fill
        fill += length
    return row, offset, n_rows


def _first_fit(lengths, capacity, order):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills = []
    for i in order:
        target = next((r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity), None)
        if target is None:
            target = len(fills)
            fills.append(0)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
    return row, offset, len(fills)


def first_fit(lengths, capacity):
    return _first_fit(lengths, capacity, range(len(lengths)))


def first_fit_decreasing(lengths, capacity):
    return _first_fit(lengths, capacity, decreasing_order(lengths))


def best_fit_decreasing(lengths, capacity):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills = []
    last_used = []  # step at which each row last received a sequence
    for step, i in enumerate(decreasing_order(lengths)):
        candidates = [r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity]
        if candidates:
            # least room first, then most recently used first
            target = min(candidates, key=lambda r: (capacity - fills[r], -last_used[r]))
        else:
            target = len(fills)
            fills.append(0)
            last_used.append(step)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
        last_used[target] = step
    return row, offset, len(fills)


REFERENCES = {
    "nf": next_fit,
    "ff": first_fit,
    "ffd": first_fit_decreasing,
    "bfd": best_fit_decreasing,
}
