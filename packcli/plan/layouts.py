"""Rows as patterns: a layout of placed lengths (back to back from offset 0) with a repeat count.

bfd and the histogram packers decide from the counts of each length alone; what they
decide is a list of runs (kernels/runs.py). Here the runs become row patterns, in plan
row order; consecutive patterns of the same layout are one. The repair pass
(plan/repair.py) rewrites some of their rows, and a plan from counts (plan/patterns.py)
joins every group's patterns and fills their slots by its rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from packcli.core.jit import kernel, njit


@dataclass
class Patterns:
    """Rows as patterns: pattern p is rows [row_start[p], row_start[p + 1]), each laid out
    as slots slot_offsets[p]..slot_offsets[p + 1] (placed length, position in the row)."""

    row_start: np.ndarray  # int64 [P + 1]
    slot_offsets: np.ndarray  # int64 [P + 1]
    slot_len: np.ndarray  # int64 [slots]
    slot_pos: np.ndarray  # int64 [slots]

    @property
    def n_rows(self) -> int:
        return int(self.row_start[-1])

    @property
    def repeat(self) -> np.ndarray:
        return np.diff(self.row_start)

    def slot_pattern(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.row_start) - 1), np.diff(self.slot_offsets))


def runs_from_counts(counts: np.ndarray, capacity: int, algorithm: str, cap: int = 0) -> tuple[np.ndarray, int]:
    """The packer's runs, one per row: (length, first_row, step, rows, offset, copies), and
    its row count."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return np.zeros((0, 6), dtype=np.int64), 0
    if algorithm == "bfd":
        from packcli.plan.kernels.fit import _bfd_plan

        run_begin, run_end, runs, n_rows = kernel(_bfd_plan, n + capacity)(counts, capacity, n)
    else:
        from packcli.plan.kernels.histogram import _histogram_runs, _histogram_strategies
        from packcli.plan.kernels.runs import _first_table_size

        max_groups = _first_table_size(counts, capacity)
        while True:
            groups, n_groups, n_rows = _histogram_strategies(counts, capacity, algorithm == "lpfhp", cap, max_groups)
            if n_groups >= 0:
                break
            max_groups *= 4
        run_begin, run_end, runs = _histogram_runs(groups, n_groups, capacity)
    run_begin = np.asarray(run_begin, dtype=np.int64)
    per_length = np.asarray(run_end, dtype=np.int64) - run_begin
    present = np.flatnonzero(per_length)
    sizes = per_length[present]
    table = np.empty((int(sizes.sum()), 6), dtype=np.int64)
    table[:, 0] = np.repeat(present, sizes)  # by length, each length's runs in the packer's order
    table[:, 1:] = np.asarray(runs)[np.repeat(run_begin[present], sizes) + within(sizes)]
    return table, int(n_rows)


def patterns_from_runs(runs: np.ndarray, n_rows: int, part_starts: np.ndarray | None = None) -> Patterns:
    """The rows the runs make, as patterns: a sweep over the rows where some run starts or
    ends; between two such rows every row holds the same runs, so the same layout.
    `part_starts`: rows where a part begins (the runs of several groups, each group's rows
    after the ones before): no pattern spans or is joined across them, so each part's
    patterns are the ones its runs alone make."""
    length, first, step, rows, offset, copies = (runs[:, i] for i in range(6))
    lo = np.where(step >= 0, first, first - (rows - 1))
    hi = lo + rows
    starts = np.zeros(0, dtype=np.int64) if part_starts is None else np.asarray(part_starts, dtype=np.int64)
    bounds, where = np.unique(np.concatenate([lo, hi, [0, n_rows], starts]), return_inverse=True)
    a, b = where[: len(runs)], where[len(runs) : 2 * len(runs)]  # each run's first and end bound
    spans = b - a
    run_of_pair = np.repeat(np.arange(len(runs)), spans)
    interval = a[run_of_pair] + within(spans)
    # each (interval, run) pair by interval, then offset: the runs of a row never overlap,
    # so their copies, laid out in this order, are the row's slots in offset order
    by_offset = lexsort_order((offset[run_of_pair], interval))
    run_of_pair, interval = run_of_pair[by_offset], interval[by_offset]
    n_slots = int(copies[run_of_pair].sum())
    slot_offsets, slot_len, slot_pos = kernel(_lay_out_pairs, len(run_of_pair) + n_slots)(
        run_of_pair,
        interval,
        np.ascontiguousarray(length, dtype=np.int64),
        np.ascontiguousarray(offset, dtype=np.int64),
        np.ascontiguousarray(copies, dtype=np.int64),
        len(bounds) - 1,
        n_slots,
    )
    return merged(Patterns(bounds.astype(np.int64), slot_offsets, slot_len, slot_pos), starts)


@njit(cache=True)
def _lay_out_pairs(pair_run, pair_interval, length, offset, copies, n_intervals, n_slots):
    """The slots of (interval, run) pairs in their order (by interval): each run's copies
    of its length side by side from its offset; and where each interval's slots begin."""
    slot_offsets = np.zeros(n_intervals + 1, dtype=np.int64)
    slot_len = np.empty(n_slots, dtype=np.int64)
    slot_pos = np.empty(n_slots, dtype=np.int64)
    j = 0
    for k in range(pair_run.shape[0]):
        r = pair_run[k]
        n = length[r]
        for c in range(copies[r]):
            slot_len[j] = n
            slot_pos[j] = offset[r] + c * n
            j += 1
        slot_offsets[pair_interval[k] + 1] += copies[r]
    for i in range(n_intervals):
        slot_offsets[i + 1] += slot_offsets[i]
    return slot_offsets, slot_len, slot_pos


def within(sizes: np.ndarray) -> np.ndarray:
    """0, 1, ..., size - 1 for each size, concatenated."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def lexsort_order(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """np.lexsort(keys) (the last key sorts first) of non-negative integer keys, by one
    int64 key that combines them where it fits: a sort of one key costs a fraction of
    lexsort's, and with no two keys equal every sort gives the one order (ties are sorted
    again, stably)."""
    n = len(keys[0])
    if not n:
        return np.zeros(0, dtype=np.int64)
    spans = [int(k.max()) + 1 for k in keys]
    if min(int(k.min()) for k in keys) < 0 or math.prod(spans) >= 1 << 62:
        return np.lexsort(keys)
    combined = np.zeros(n, dtype=np.int64)
    scale = 1
    for k, span in zip(keys, spans):
        combined += k.astype(np.int64) * scale
        scale *= span
    order = np.argsort(combined)
    ranked = combined[order]
    if (ranked[1:] == ranked[:-1]).any():
        order = np.argsort(combined, kind="stable")
    return order


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """0, then the running sums of `sizes`: where each of them starts, and their end."""
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def merged(p: Patterns, part_starts: np.ndarray | None = None) -> Patterns:
    """The patterns with consecutive ones of the same layout joined into one, except where
    a row of `part_starts` begins the next."""
    n = len(p.row_start) - 1
    if n <= 1:
        return p
    sizes = np.diff(p.slot_offsets)
    same = kernel(_same_as_previous, len(p.slot_len) + n)(p.slot_offsets, p.slot_len, p.slot_pos)
    if part_starts is not None and len(part_starts):
        same &= ~np.isin(p.row_start[1:-1], part_starts)
    keep = np.concatenate([[True], ~same])
    starts = np.flatnonzero(keep)
    row_start = np.concatenate([p.row_start[starts], p.row_start[-1:]])
    slot_keep = np.repeat(keep, sizes)
    new_sizes = sizes[starts]
    return Patterns(row_start, offsets_of(new_sizes), p.slot_len[slot_keep], p.slot_pos[slot_keep])


@njit(cache=True)
def _same_as_previous(slot_offsets, slot_len, slot_pos):
    """Per pattern after the first: whether its slots (length and position) are the ones
    of the pattern before it."""
    n = slot_offsets.shape[0] - 1
    same = np.zeros(max(n - 1, 0), dtype=np.bool_)
    for i in range(1, n):
        a, b, c = slot_offsets[i - 1], slot_offsets[i], slot_offsets[i + 1]
        if c - b != b - a:
            continue
        equal = True
        for k in range(b - a):
            if slot_len[a + k] != slot_len[b + k] or slot_pos[a + k] != slot_pos[b + k]:
                equal = False
                break
        same[i - 1] = equal
    return same


def sliced(p: Patterns, first: int, last: int) -> Patterns:
    """Patterns first .. last - 1 on their own: rows and slots numbered from 0."""
    a, b = int(p.slot_offsets[first]), int(p.slot_offsets[last])
    return Patterns(
        p.row_start[first : last + 1] - p.row_start[first],
        p.slot_offsets[first : last + 1] - a,
        p.slot_len[a:b],
        p.slot_pos[a:b],
    )


def joined(parts: list[Patterns]) -> Patterns:
    """The patterns of several groups, one after another (rows and slots renumbered)."""
    if not parts:
        zero = np.zeros(1, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        return Patterns(zero, zero.copy(), empty, empty.copy())
    row_start, slot_offsets, rows, slots = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)], 0, 0
    for q in parts:
        row_start.append(q.row_start[1:] + rows)
        slot_offsets.append(q.slot_offsets[1:] + slots)
        rows += q.n_rows
        slots += len(q.slot_len)
    return Patterns(
        np.concatenate(row_start),
        np.concatenate(slot_offsets),
        np.concatenate([q.slot_len for q in parts]),
        np.concatenate([q.slot_pos for q in parts]),
    )
