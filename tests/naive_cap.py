"""Slow references for the capped packers: the rules of tests/naive.py, plus a row that
holds `cap` sequences receives nothing more."""

from __future__ import annotations

from tests.naive import decreasing_order, histogram_packer


def next_fit_capped(lengths, capacity, cap):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    n_rows, fill, count = 0, capacity, cap
    for i, length in enumerate(lengths):
        if fill + length > capacity or count >= cap:
            n_rows += 1
            fill, count = 0, 0
        row[i], offset[i] = n_rows - 1, fill
        fill += length
        count += 1
    return row, offset, n_rows


def _first_fit_capped(lengths, capacity, cap, order):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills, counts = [], []
    for i in order:
        target = next(
            (r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity and counts[r] < cap),
            None,
        )
        if target is None:
            target = len(fills)
            fills.append(0)
            counts.append(0)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
        counts[target] += 1
    return row, offset, len(fills)


def first_fit_capped(lengths, capacity, cap):
    return _first_fit_capped(lengths, capacity, cap, range(len(lengths)))


def first_fit_decreasing_capped(lengths, capacity, cap):
    return _first_fit_capped(lengths, capacity, cap, decreasing_order(lengths))


def best_fit_decreasing_capped(lengths, capacity, cap):
    row, offset = [0] * len(lengths), [0] * len(lengths)
    fills, counts, last_used = [], [], []
    for step, i in enumerate(decreasing_order(lengths)):
        candidates = [r for r, fill in enumerate(fills) if fill + lengths[i] <= capacity and counts[r] < cap]
        if candidates:
            target = min(candidates, key=lambda r: (capacity - fills[r], -last_used[r]))
        else:
            target = len(fills)
            fills.append(0)
            counts.append(0)
            last_used.append(step)
        row[i], offset[i] = target, fills[target]
        fills[target] += lengths[i]
        counts[target] += 1
        last_used[target] = step
    return row, offset, len(fills)


CAPPED_REFERENCES = {
    "nf": next_fit_capped,
    "ff": first_fit_capped,
    "ffd": first_fit_decreasing_capped,
    "bfd": best_fit_decreasing_capped,
    "spfhp": lambda lengths, capacity, cap: histogram_packer(lengths, capacity, False, cap),
    "lpfhp": lambda lengths, capacity, cap: histogram_packer(lengths, capacity, True, cap),
}
